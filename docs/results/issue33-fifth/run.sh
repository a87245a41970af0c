#!/usr/bin/env bash
# Issue 33, fifth pass: the final figures after reads are moved by their pace, askers say whom they pass over, and the pull
# shuts its peer connections at its end (the bench ran on 2523164; one run of this script, nothing else running on the machine):
# uneven x5, even fan-out at 100 Mbit/s x5, agent-killed x5, late-joiner x5; then the same uneven x5 on 1a88f71 (before this pass).
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-fifth
lab=./target/release/fastrepl-lab
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
mkdir -p $R/uneven/logs
run uneven env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven/logs $lab bench --scenario uneven --repeat 5 --out $R/uneven
run fanout-100mbit $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit
run agent-killed $lab bench --scenario agent-killed --modes fastrepl-tcp --repeat 5 --out $R/agent-killed
run late-joiner $lab bench --scenario late-joiner --modes fastrepl-tcp --repeat 5 --out $R/late-joiner
# Side by side, in the same sitting: the code before this pass (1a88f71), built in a worktree:
#   git worktree add /work/wt-base 1a88f71 && (cd /work/wt-base && CARGO_TARGET_DIR=/work/wt-base/target cargo build --release)
if [ -x "${BASE_LAB:-}" ]; then
  mkdir -p $R/uneven-base-1a88f71/logs
  run uneven-base-1a88f71 env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven-base-1a88f71/logs $BASE_LAB bench --scenario uneven --repeat 5 --out $R/uneven-base-1a88f71
fi
