#!/usr/bin/env bash
# The CLI contract other tools rely on, checked against the real binary.
set -u
bin="$1"
fail=0
check() {  # check <name> <expected-exit> <expected-substring> -- cmd...
  local name="$1" want_rc="$2" want_text="$3"; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc"; echo "$out" | head -20; fail=1; return
  fi
  if ! grep -qF -- "$want_text" <<<"$out"; then
    echo "FAIL $name: output lacks '$want_text'"; echo "$out" | head -20; fail=1; return
  fi
  echo "ok   $name"
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo '{"cache": {"blok_size": 16}}' > "$tmp/typo.json"
echo '{"scheduler": {"max_num_seqs": 0}}' > "$tmp/range.json"
echo '{"server": {"http_port": 0, "grpc_port": 0}}' > "$tmp/good.json"

check help          0 "Usage: kvserve"                          -- "$bin" --help
check version       0 "kvserve 0.1.0"                           -- "$bin" version
check dump          0 '"block_size": 16'                        -- "$bin" config --dump
check dump_file     0 '"http_port": 0'                          -- "$bin" config --dump --config "$tmp/good.json"
check typo_key      2 "did you mean 'cache.block_size'"         -- "$bin" config --dump --config "$tmp/typo.json"
check out_of_range  2 "scheduler.max_num_seqs=0: must be an integer in [1,65536]" -- "$bin" config --dump --config "$tmp/range.json"
check bad_flag      2 "cache.block_size=12: must be a power of two in [8,128]" -- "$bin" config --dump --block-size 12
check env_override  0 '"block_size": 32'                        -- env KVSERVE_CACHE_BLOCK_SIZE=32 "$bin" config --dump
check env_typo      2 "unknown variable KVSERVE_CACHE_BLOK_SIZE" -- env KVSERVE_CACHE_BLOK_SIZE=32 "$bin" config --dump
check missing_file  2 "cannot be read"                          -- "$bin" config --dump --config "$tmp/nope.json"
check no_args       2 "Usage: kvserve"                          -- "$bin"
# docs/configuration.md embeds the generated field table; it must match the binary.
docs="$(dirname "$0")/../../../docs/configuration.md"
if diff <("$bin" config --fields) <(sed -n '/<!-- fields:begin -->/,/<!-- fields:end -->/p' "$docs" | sed '1d;$d') >/dev/null; then
  echo "ok   docs_field_table"
else
  echo "FAIL docs_field_table: docs/configuration.md is stale; regenerate with kvserve config --fields"; fail=1
fi
exit $fail
