#!/usr/bin/env bash
# Issue 44, item 2: a ~3 GiB snapshot served to one join over loopback tcp, by a relay in memory and
# by a relay with --store inside a 768 MiB memory cgroup (v1, no swap: what it cannot reclaim gets it
# killed), alternating, RUNS times each, one master and one RDB size for all. Prints one line per
# run and writes runs.jsonl beside this script (each join's report, the relay's last status and the
# cgroup's counters). Needs root (the cgroup), a release build (cargo build --release) and
# scripts/setup.sh's servers.
#   RUNS=5 VALUES=3072 (1 MiB values) LIMIT=768M STORE_DIR=/var/tmp/fastrepl-store bash cgroup.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=$root/target/release/fastrepl
runs=${RUNS:-5}
values=${VALUES:-3072}
limit=${LIMIT:-768M}
store=${STORE_DIR:-/var/tmp/fastrepl-issue44-store}
cg=/sys/fs/cgroup/memory/fastrepl-issue44
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
  rm -rf "$work" "$store"
}
trap cleanup EXIT
mport=$(free_port)
redis-server --port "$mport" --save '' --appendonly no --rdbcompression no --repl-diskless-sync yes \
  --repl-diskless-sync-delay 0 --enable-debug-command yes --dir "$work" --logfile "$work/master.log" & pids+=($!)
until redis-cli -p "$mport" ping >/dev/null 2>&1; do sleep 0.1; done
# 1 MiB values, no RDB compression: the snapshot is the dataset's size.
redis-cli -p "$mport" DEBUG POPULATE "$values" key 1048576 >/dev/null
mkdir -p "$cg" "$store"
echo "$limit" > "$cg/memory.limit_in_bytes"
out=$here/runs.jsonl
: > "$out"
wait_complete() {
  for _ in $(seq 1 1200); do
    if "$bin" status --relay "$1" --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if any(g["state"]=="complete" for g in s["generations"]) else 1)' 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  echo "no complete generation at $1" >&2; return 1
}
for i in $(seq 1 "$runs"); do
  for mode in memory store; do
    lport=$(free_port); rport=$(free_port)
    redis-server --port "$rport" --save '' --appendonly no --dir "$work" --logfile "$work/replica-$rport.log" & rpid=$!
    until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done
    echo 0 > "$cg/memory.max_usage_in_bytes" 2>/dev/null || true
    echo 0 > "$cg/memory.failcnt" 2>/dev/null || true
    if [[ $mode == store ]]; then
      # The relay enters the cgroup before it starts (exec keeps the pid).
      bash -c "echo \$\$ > $cg/cgroup.procs; exec $bin relay --master 127.0.0.1:$mport --listen 127.0.0.1:$lport --transport tcp --store $store" 2> "$work/relay-$mode-$i.log" & relay=$!
    else
      "$bin" relay --master "127.0.0.1:$mport" --listen "127.0.0.1:$lport" --transport tcp 2> "$work/relay-$mode-$i.log" & relay=$!
    fi
    wait_complete "127.0.0.1:$lport"
    "$bin" join --relay "127.0.0.1:$lport" --replica "127.0.0.1:$rport" --transport tcp --json > "$work/join.json" 2> "$work/join-$mode-$i.log" || true
    "$bin" status --relay "127.0.0.1:$lport" --json > "$work/status.json" 2>/dev/null || echo '{}' > "$work/status.json"
    alive=$(kill -0 "$relay" 2>/dev/null && echo true || echo false)
    cgmax=$(cat "$cg/memory.max_usage_in_bytes"); failcnt=$(cat "$cg/memory.failcnt")
    oomkill=$(awk '/oom_kill /{print $2}' "$cg/memory.oom_control" 2>/dev/null || echo 0)
    stat=$(awk '{printf "\"%s\": %s, ", $1, $2}' "$cg/memory.stat" | sed 's/, $//')
    kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true
    kill "$rpid"; wait "$rpid" 2>/dev/null || true
    python3 - "$mode" "$i" "$alive" "$cgmax" "$failcnt" "${oomkill:-0}" "{$stat}" "$work/join.json" "$work/status.json" >> "$out" <<'PY'
import json, sys
mode, i, alive, cgmax, failcnt, oom, stat, jf, sf = sys.argv[1:]
lines = [l for l in open(jf).read().splitlines() if l.startswith("{")]
report = json.loads(lines[-1]) if lines else {}
status = json.load(open(sf))
print(json.dumps({"mode": mode, "run": int(i), "relay_alive": alive == "true", "cgroup_max_usage_bytes": int(cgmax),
  "cgroup_failcnt": int(failcnt), "cgroup_oom_kills": int(oom), "cgroup_stat": json.loads(stat) if mode == "store" else None,
  "join": report, "relay_status": status}))
PY
    tail -1 "$out" > "$work/last.jsonl" && python3 "$here/summary.py" "$work/last.jsonl"
  done
done
python3 "$here/summary.py" "$out"
