#!/usr/bin/env bash
# Issue 33, eighth pass: the join's window of 16 blocks (the default before this pass) against 32,
# side by side in one sitting, on one build (the tracker's starvation guard in both), with nothing
# else running on the machine: uneven x5 at each window, the even fan-out at 100 Mbit/s x5 at 32
# (N = 1, 2, 4, 8), then at 16 (N = 1, 8). The window is passed to every join with
# FASTREPL_BENCH_JOIN_ARGS (recorded in each result's parameters). Directories are named after the
# commit that ran. Build first: cargo build --release -p cli -p fastrepl-lab.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-eighth
lab=./target/release/fastrepl-lab
c=$(git rev-parse --short=7 HEAD)
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
if [ -z "${SECOND:-}" ]; then
for w in 16 32; do
  mkdir -p $R/uneven-w$w-$c/logs
  run uneven-w$w-$c env FASTREPL_BENCH_JOIN_ARGS="--window-blocks $w" FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven-w$w-$c/logs $lab bench --scenario uneven --repeat 5 --out $R/uneven-w$w-$c
done
run fanout-100mbit-w32-$c env FASTREPL_BENCH_JOIN_ARGS="--window-blocks 32" $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit-w32-$c
run fanout-n8-w16-$c env FASTREPL_BENCH_JOIN_ARGS="--window-blocks 16" $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,8 --repeat 5 --out $R/fanout-n8-w16-$c
else
# SECOND=1, the next sitting: the even fan-out at N = 1 and 2, x5, at 16 then at 32 (the first
# sitting's N = 2 at 32, 1.13 from the fork with up to 1.08 copies, had no 16 beside it).
for w in 16 32; do
  run fanout-n2-w$w-$c env FASTREPL_BENCH_JOIN_ARGS="--window-blocks $w" $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2 --repeat 5 --out $R/fanout-n2-w$w-$c
done
fi
