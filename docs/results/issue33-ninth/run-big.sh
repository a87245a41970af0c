#!/usr/bin/env bash
# Issue 33, ninth pass, the next lead's first look on the bench (not a default): the even fan-out at
# 100 Mbit/s with a 1 GiB snapshot (the serve caches fill and drop), N = 1 and 8, x2, the join's
# defaults (window 32, cache 512 MiB) against a window of 64 with a 384 MiB cache (the same memory),
# alternating. Run after run.sh, on the same build.
set -u
cd "$(dirname "$0")/../../.."
R=$PWD/docs/results/issue33-ninth
c=${C:-$(git rev-parse --short=7 HEAD)}
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
run fanout-1gib-default-$c ./target/release/fastrepl-lab bench --scenario fanout --links 100mbit --values 256 --modes fastrepl-tcp --replicas 1,8 --repeat 2 --out $R/fanout-1gib-default-$c
run fanout-1gib-w64-cache384-$c env FASTREPL_BENCH_JOIN_ARGS="--window-blocks 64 --serve-cache-mib 384" ./target/release/fastrepl-lab bench --scenario fanout --links 100mbit --values 256 --modes fastrepl-tcp --replicas 1,8 --repeat 2 --out $R/fanout-1gib-w64-cache384-$c
