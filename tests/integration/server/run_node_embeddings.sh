#!/usr/bin/env bash
# Runs node/embeddings_clients_test.mjs (OpenAI Node SDK embeddings.create) against a server
# command. Installs the SDK itself into a temporary directory with npm.
#   run_node_embeddings.sh SERVER_CMD...
set -u
here="$(cd "$(dirname "$0")" && pwd)"
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is required for the Node client tests"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error openai@5.23.2 >"$tmp/npm.log" 2>&1; then
  echo "FAIL: npm install of the OpenAI SDK failed (is the npm registry reachable?)"
  cat "$tmp/npm.log"
  exit 1
fi
exec node "$here/node/embeddings_clients_test.mjs" --modules "$tmp/node_modules" -- "$@"
