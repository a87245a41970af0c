#!/usr/bin/env bash
# Issue 33, tenth pass, on the bench, in one sitting with nothing else on the machine (Redis 7.0,
# fastrepl-tcp, namespace hosts):
#   1. the uneven fleet (item 1: 4 replicas, one host at 20 Mbit/s, 128 MiB), x5;
#   2. the even fan-out at 100 Mbit/s, N = 1, 2, 4, 8, x5 (item 3; the README's headline table);
#   3. agent-killed and late-joiner (1 Gbit/s, 256 MiB), x5, this pass's defaults and the ninth
#      pass's (--window-blocks 32 --serve-cache-mib 512) side by side;
#   4. the even fan-out with a 1 GiB snapshot (the serve caches fill and drop), N = 1 and 8, this
#      pass's defaults (window 64, cache 384 MiB) against the ninth pass's, alternating, three times
#      each.
# The uneven fleet's 128 MiB (32 blocks) is pulled exactly as before; at 256 MiB the look-ahead and
# the caches are the same, but the window's own blocks (asked for first) reach 64 ahead, not 32.
# Build first: cargo build --release -p cli -p fastrepl-lab.
set -u
cd "$(dirname "$0")/../../.."
R=$PWD/docs/results/issue33-tenth
lab=./target/release/fastrepl-lab
c=$(git rev-parse --short=7 HEAD)
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
run uneven-$c $lab bench --scenario uneven --repeat 5 --out $R/uneven-$c
run fanout-100mbit-$c $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit-$c
before="--window-blocks 32 --serve-cache-mib 512"
for s in agent-killed late-joiner; do
  run $s-$c $lab bench --scenario $s --modes fastrepl-tcp --repeat 5 --out $R/$s-$c
  run $s-before-$c env FASTREPL_BENCH_JOIN_ARGS="$before" $lab bench --scenario $s --modes fastrepl-tcp --repeat 5 --out $R/$s-before-$c
done
for i in 1 2 3; do
  run fanout-1gib-now-$i-$c $lab bench --scenario fanout --links 100mbit --values 256 --modes fastrepl-tcp --replicas 1,8 --repeat 1 --out $R/fanout-1gib-now-$i-$c
  run fanout-1gib-before-$i-$c env FASTREPL_BENCH_JOIN_ARGS="$before" $lab bench --scenario fanout --links 100mbit --values 256 --modes fastrepl-tcp --replicas 1,8 --repeat 1 --out $R/fanout-1gib-before-$i-$c
done
