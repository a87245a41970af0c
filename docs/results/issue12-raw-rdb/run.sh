#!/usr/bin/env bash
# What --source-rdb-raw does on compressible data: a master with 4 M keys of 200-byte DEBUG POPULATE
# values (highly compressible), a replica of it as the source, and one relay capture per row
# (compressed, raw, alternating, 3 each). Prints the snapshot's bytes and the capture's seconds from
# the relay's "snapshot complete" line. Loopback; needs redis-server and a built fastrepl.
set -euo pipefail
B=${FASTREPL_BIN:-$(dirname "$0")/../../../target/release/fastrepl}
d=$(mktemp -d); trap 'redis-cli -p 16500 shutdown nosave >/dev/null 2>&1 || true; redis-cli -p 16501 shutdown nosave >/dev/null 2>&1 || true; rm -rf "$d"' EXIT
redis-server --port 16500 --save "" --daemonize yes --logfile "$d/m.log" --dir "$d" --enable-debug-command yes --repl-diskless-sync-delay 0
until redis-cli -p 16500 ping >/dev/null 2>&1; do sleep 0.1; done
redis-cli -p 16500 debug populate 4000000 key 200 >/dev/null
redis-server --port 16501 --save "" --daemonize yes --logfile "$d/r.log" --dir "$d" --replicaof 127.0.0.1 16500 --repl-diskless-sync-delay 0
until redis-cli -p 16501 info replication 2>/dev/null | grep -q "master_link_status:up"; do sleep 0.5; done
for mode in compressed raw compressed raw compressed raw; do
  extra=(); [[ $mode == raw ]] && extra=(--source-rdb-raw)
  "$B" relay --master 127.0.0.1:16500 --source 127.0.0.1:16501 "${extra[@]}" --listen 127.0.0.1:17500 >"$d/relay.log" 2>&1 & p=$!
  until grep -q "snapshot complete" "$d/relay.log"; do sleep 0.2; done
  echo "$mode: $(grep 'snapshot complete' "$d/relay.log" | grep -o 'bytes=[0-9]* secs=[0-9.]*')"
  kill $p; wait $p 2>/dev/null || true
done
echo "source rdbcompression after: $(redis-cli -p 16501 config get rdbcompression | tail -1); master $(redis-cli -p 16500 info stats | grep total_forks)"
