#!/usr/bin/env bash
# Issue 33, seventh pass: the bench on this pass's last swarm change (the holder's arrival ended
# only by its own word), with nothing else running on the machine: uneven x5, and with FANOUT=1 the
# even fan-out at 100 Mbit/s x5 (N = 1, 2, 4, 8). Directories are named after the commit that ran.
# Build first: cargo build --release -p cli -p fastrepl-lab.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-seventh
lab=./target/release/fastrepl-lab
c=$(git rev-parse --short=7 HEAD)
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
if [ -z "${N8:-}" ]; then
mkdir -p $R/uneven-$c/logs
run uneven-$c env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven-$c/logs $lab bench --scenario uneven --repeat 5 --out $R/uneven-$c
if [ -n "${FANOUT:-}" ]; then
  run fanout-100mbit-$c $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit-$c
fi
fi
# N8=1: the even fan-out at N = 1 and 8 only, x5, with BASE_LAB's build first (the code before
# d8b9cbf: git worktree add /work/wt-base 718b36d, cargo build --release -p cli there, this
# checkout's fastrepl-lab copied beside its fastrepl), then this checkout's: is the N = 8 copies'
# median of 1.05 above ad2a1cc's 1.02 the change or the bench's spread?
if [ -n "${N8:-}" ]; then
  run fanout-n8-base-718b36d-beside-$c "$BASE_LAB" bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,8 --repeat 5 --out $R/fanout-n8-base-718b36d-beside-$c
  run fanout-n8-$c $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,8 --repeat 5 --out $R/fanout-n8-$c
fi
