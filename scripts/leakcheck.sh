#!/usr/bin/env bash
# Leak and memory-error check of a UCX pull under valgrind: a relay serving a file, and `fastrepl
# fetch --transport ucx` over UCX's tcp and shared-memory transports; plus the ucx crate's own test
# (context, worker, endpoint, registration, rkey, GETs incl. dropping one in flight).
# Passes when valgrind finds no errors and no definitely-lost bytes. Prints one line per check:
# "leakcheck: <name> ok|FAILED".
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if ! command -v valgrind >/dev/null; then
  echo "leakcheck: skipped (valgrind not installed; scripts/setup.sh installs it)"
  exit 0
fi
bin=target/release/fastrepl
work=$(mktemp -d)
relay_pid=
cleanup() { [[ -n $relay_pid ]] && kill "$relay_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
vg=(valgrind --quiet --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite --error-exitcode=99)
export FASTREPL_TOKEN=leakcheck-token-0123456789
head -c $((3 * 1024 * 1024 + 777)) /dev/urandom >"$work/in.bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
FASTREPL_LOG=warn "$bin" relay --file "$work/in.bin" --listen "127.0.0.1:$port" --block-size 1048576 >"$work/relay.log" 2>&1 &
relay_pid=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
fail=0
for tls in tcp sm; do
  if UCX_TLS=$tls FASTREPL_LOG=warn "${vg[@]}" "$bin" fetch --relay "127.0.0.1:$port" --transport ucx --out "$work/out-$tls" >"$work/vg-$tls.log" 2>&1 \
     && cmp -s "$work/in.bin" "$work/out-$tls"; then
    echo "leakcheck: fetch over ucx ($tls) ok"
  else
    echo "leakcheck: fetch over ucx ($tls) FAILED"; cat "$work/vg-$tls.log"; fail=1
  fi
done
test_bin=$(cargo test --release -p ucx --no-run --message-format=json 2>/dev/null | python3 -c '
import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="ucx": print(m["executable"])' | tail -1)
if [[ -n $test_bin ]] && "${vg[@]}" "$test_bin" --test-threads=1 get_within_one_process >"$work/vg-unit.log" 2>&1; then
  echo "leakcheck: ucx unit test ok"
else
  echo "leakcheck: ucx unit test FAILED"; cat "$work/vg-unit.log"; fail=1
fi
exit $fail
