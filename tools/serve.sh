#!/usr/bin/env bash
# Command 1 of the README: installs what is missing, builds, and serves the bundled
# model: OpenAI HTTP on 127.0.0.1:8000, gRPC on 127.0.0.1:50051, /metrics on HTTP.
# Extra arguments go to `kvserve serve` (e.g. --http-port 0 --kv-dtype int8).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KVSERVE_SETUP=build "$root/tools/build.sh"
exec "$root/build/bin/kvserve" serve "$@"
