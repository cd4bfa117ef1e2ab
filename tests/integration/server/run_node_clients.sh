#!/usr/bin/env bash
# Runs node/clients_test.mjs, then node/speculative_clients_test.mjs and, on the real daemon,
# node/lora_clients_test.mjs (OpenAI Node SDK + @grpc/grpc-js) against a server command, or the
# one script KVSERVE_NODE_SCRIPT names.
# Installs the client packages itself into a temporary directory with npm.
#   run_node_clients.sh PROTO_FILE KV_POLICY SERVER_CMD...
# KV_POLICY is the kv_compression policy the requests ask for (and usage must report).
# KVSERVE_NODE_SCRIPT names another script of node/ taking the same arguments (default
# clients_test.mjs).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
proto="$1"; policy="$2"; shift 2
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "FAIL: '$tool' is required for the Node client tests"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# The official SDK; the gRPC clients only for clients_test.mjs (another script needs the SDK).
packages=(openai@5.23.2)
[ -z "${KVSERVE_NODE_SCRIPT:-}" ] && packages+=(@grpc/grpc-js@1.14.7 @grpc/proto-loader@0.8.1)
if ! npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "${packages[@]}" >"$tmp/npm.log" 2>&1; then
  echo "FAIL: npm install of the client packages failed (is the npm registry reachable?)"
  cat "$tmp/npm.log"
  exit 1
fi
if [ -n "${KVSERVE_NODE_SCRIPT:-}" ]; then
  exec node "$here/node/$KVSERVE_NODE_SCRIPT" --modules "$tmp/node_modules" --proto "$proto" --policy "$policy" -- "$@"
fi
status=0
node "$here/node/clients_test.mjs" --modules "$tmp/node_modules" --proto "$proto" --policy "$policy" -- "$@" || status=1
# Speculative decoding requests (one more short server run, sharing the npm install).
node "$here/node/speculative_clients_test.mjs" --modules "$tmp/node_modules" --proto "$proto" -- "$@" || status=1
# LoRA adapters selected by `model` (the real daemon only: the fake engine has no adapters).
if [ "${!#}" = serve ]; then
  node "$here/node/lora_clients_test.mjs" --modules "$tmp/node_modules" --proto "$proto" -- "$@" || status=1
fi
exit $status
