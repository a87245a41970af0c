#!/usr/bin/env bash
# Issue 33, sixth pass: a host on a slow link known by its link (24bb09c), side by side with the code before
# it (bcc8342, whose swarm and pull code is 8ad96dd's: issue33-fifth/final), one run of this script with
# nothing else running on the machine: uneven x5 on each (this pass's first, then the base's), then this
# pass's even fan-out at 100 Mbit/s x5, agent-killed x5 and late-joiner x5.
# The base: git worktree add /work/wt-base bcc8342 && (cd /work/wt-base && CARGO_TARGET_DIR=/work/wt-base/target cargo build --release)
# (or copies of a build of it: fastrepl-lab finds fastrepl beside itself), BASE_LAB=/work/wt-base/target/release/fastrepl-lab.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-sixth
lab=./target/release/fastrepl-lab
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
uneven() { local name=$1 l=$2; mkdir -p $R/$name/logs; run $name env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/$name/logs $l bench --scenario uneven --repeat 5 --out $R/$name; }
uneven uneven $lab
if [ -x "${BASE_LAB:-}" ]; then uneven uneven-base-bcc8342 "$BASE_LAB"; fi
run fanout-100mbit $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit
run agent-killed $lab bench --scenario agent-killed --modes fastrepl-tcp --repeat 5 --out $R/agent-killed
run late-joiner $lab bench --scenario late-joiner --modes fastrepl-tcp --repeat 5 --out $R/late-joiner
