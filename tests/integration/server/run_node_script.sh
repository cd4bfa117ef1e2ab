#!/usr/bin/env bash
# Runs scripts of node/ that need only npm packages (no proto) against a server command, one
# after the other (each starts its own server), installing the packages once into a
# temporary directory with npm. Fails if any script fails.
#   run_node_script.sh "SCRIPT ..." "PACKAGE@VERSION ..." SERVER_CMD...
# e.g. node/embeddings_clients_test.mjs (OpenAI SDK) and node/frameworks_clients_test.mjs
# (LangChain JS, the Vercel AI SDK).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
read -r -a scripts <<<"$1"; read -r -a packages <<<"$2"; shift 2
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is required for the Node client tests"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "${packages[@]}" >"$tmp/npm.log" 2>&1; then
  echo "FAIL: npm install of ${packages[*]} failed (is the npm registry reachable?)"
  cat "$tmp/npm.log"
  exit 1
fi
status=0
for script in "${scripts[@]}"; do
  node "$here/node/$script" --modules "$tmp/node_modules" -- "$@" || status=1
done
exit $status
