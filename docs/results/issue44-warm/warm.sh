#!/usr/bin/env bash
# Issue 44, item 4: what a warm join costs against its generation's log, beside a fresh capture.
# One master (SNAPSHOT_MIB of 1 KiB values, no RDB compression: the RDB is the dataset's size). For each log size L (LOGS, MiB of SETs written after
# the capture) and each run: a relay with --store captures, L MiB are written, a new replica joins
# from that generation (warm: the RDB, then L MiB of log replayed); then a new relay captures
# on demand for another new replica (fresh: the source's RDB, streamed while it is written, and
# what little log follows). Writes runs.jsonl beside this script, one line per join with its report.
# Needs a release build (cargo build --release) and redis-server/redis-benchmark (Redis 7.0).
#   RUNS=5 SNAPSHOT_MIB=256 LOGS="0 128 256 384 512" bash warm.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=$root/target/release/fastrepl
runs=${RUNS:-5}
snap=${SNAPSHOT_MIB:-256}
logs=${LOGS:-0 128 256 384 512}
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mport=$(free_port)
redis-server --port "$mport" --save "" --appendonly no --rdbcompression no --repl-diskless-sync yes --repl-diskless-sync-delay 0 \
  --repl-backlog-size 1gb --enable-debug-command yes --dir "$work" --logfile "$work/master.log" & pids+=($!)
until redis-cli -p "$mport" ping >/dev/null 2>&1; do sleep 0.1; done
keys=$((snap * 1024))
out=$here/runs.jsonl
: > "$out"
status_of() { "$bin" status --relay "$1" --json 2>/dev/null || echo '{}'; }
wait_complete() {
  for _ in $(seq 1 1200); do
    if status_of "$1" | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if any(g["state"]=="complete" for g in s.get("generations",[])) else 1)'; then return 0; fi
    sleep 0.2
  done
  echo "no complete generation at $1" >&2; return 1
}
# One join of a new, empty replica from the relay at $1; its report appended as mode $2.
join_one() {
  local relay=$1 mode=$2 l=$3 i=$4 rport rpid
  rport=$(free_port)
  redis-server --port "$rport" --save '' --appendonly no --dir "$work" --logfile "$work/replica-$rport.log" & rpid=$!
  until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" join --relay "$relay" --replica "127.0.0.1:$rport" --transport tcp --json > "$work/join.json" 2> "$work/join-$mode-$l-$i.log" || true
  t1=$(date +%s.%N)
  status_of "$relay" > "$work/status.json"
  kill "$rpid"; wait "$rpid" 2>/dev/null || true
  python3 - "$mode" "$l" "$i" "$t0" "$t1" "$work/join.json" "$work/status.json" >> "$out" <<'PY'
import json, sys
mode, l, i, t0, t1, jf, sf = sys.argv[1:]
lines = [x for x in open(jf).read().splitlines() if x.startswith("{")]
report = json.loads(lines[-1]) if lines else {}
gens = json.load(open(sf)).get("generations", [])
print(json.dumps({"mode": mode, "log_mib_written": int(l), "run": int(i), "wall_secs": float(t1) - float(t0), "join": report,
  "generations": [{k: g.get(k) for k in ("id", "state", "rdb_bytes", "log_bytes")} for g in gens]}))
PY
  tail -1 "$out" | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); j=r["join"]; print(r["mode"], r["log_mib_written"], "MiB run", r["run"], "exit ok" if j.get("ok") else "FAILED", "handoff", j.get("handoff"), "log_bytes", j.get("log_bytes"), "wall %.1f s" % r["wall_secs"])'
}
for i in $(seq 1 "$runs"); do
  for l in $logs; do
    # Every cell from the same dataset, under the names redis-benchmark -r writes (key:%012d), so
    # the writes below overwrite it as a steady-state cache's do, not grow it.
    redis-cli -p "$mport" FLUSHALL >/dev/null
    python3 - "$keys" <<'PY' | redis-cli -p "$mport" --pipe >/dev/null
import sys
v = b"x" * 1024
out = sys.stdout.buffer
for i in range(int(sys.argv[1])):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1024\r\n%s\r\n" % (len(k), k, v))
PY
    lport=$(free_port)
    "$bin" relay --master "127.0.0.1:$mport" --listen "127.0.0.1:$lport" --transport tcp --store "$work/store-$lport" --log-max-bytes 8589934592 --log-max-percent 0 2> "$work/relay-warm-$l-$i.log" & relay=$!
    mkdir -p "$work/store-$lport"
    wait_complete "127.0.0.1:$lport"
    if (( l > 0 )); then
      # 1 KiB SETs over the dataset's keys (random): ~1.06 KiB of log each.
      redis-benchmark -p "$mport" -t set -d 1024 -r "$keys" -n $((l * 1024 * 1024 / 1090)) -P 32 -q > /dev/null
    fi
    join_one "127.0.0.1:$lport" warm "$l" "$i"
    kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true
    rm -rf "$work/store-$lport"
    lport=$(free_port); mkdir -p "$work/store-$lport"
    "$bin" relay --master "127.0.0.1:$mport" --listen "127.0.0.1:$lport" --transport tcp --store "$work/store-$lport" --capture on-demand 2> "$work/relay-fresh-$l-$i.log" & relay=$!
    until "$bin" status --relay "127.0.0.1:$lport" --json >/dev/null 2>&1; do sleep 0.1; done
    join_one "127.0.0.1:$lport" fresh "$l" "$i"
    kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true
    rm -rf "$work/store-$lport"
  done
done
python3 "$here/summary.py" "$out"
