#!/usr/bin/env bash
# Issue 33, sixth pass, side by side with the code before it (bcc8342, whose swarm and pull code is
# 8ad96dd's: issue33-fifth/final), each run of this script with nothing else running on the machine:
# uneven x5 on this checkout's commit, then uneven x5 on the base; then, with FULL=1, this commit's even fan-out at
# 100 Mbit/s x5, agent-killed x5 and late-joiner x5. Directories are named after the commit that ran
# (uneven-<commit>, uneven-base-bcc8342-beside-<commit>, ...).
# FANOUT=1: the even fan-out without the other two.
# First sitting: 24bb09c (the link measure), before FULL existed; its directories were renamed by hand
# (uneven/ to uneven-24bb09c/, uneven-base-bcc8342/ kept). Then 72341cc (12ecf99's code: the claim rule),
# 38c8e62 and 5b4e06d with BASE_LAB and FULL=1 (stopped when a result changed the code: only what finished
# is kept), and ad2a1cc with FANOUT=1 and no base (three base sittings were already in).
# The base: git worktree add /work/wt-base bcc8342 && (cd /work/wt-base && CARGO_TARGET_DIR=/work/wt-base/target cargo build --release)
# (or a copy of its fastrepl-lab and fastrepl side by side: fastrepl-lab finds fastrepl beside itself);
# then BASE_LAB=/work/wt-base/target/release/fastrepl-lab docs/results/issue33-sixth/run.sh.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-sixth
lab=./target/release/fastrepl-lab
c=$(git rev-parse --short=7 HEAD)
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
uneven() { local name=$1 l=$2; mkdir -p $R/$name/logs; run $name env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/$name/logs $l bench --scenario uneven --repeat 5 --out $R/$name; }
uneven uneven-$c $lab
if [ -x "${BASE_LAB:-}" ]; then uneven uneven-base-bcc8342-beside-$c "$BASE_LAB"; fi
if [ -n "${FULL:-}${FANOUT:-}" ]; then
  run fanout-100mbit-$c $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit-$c
fi
if [ -n "${FULL:-}" ]; then
  run agent-killed-$c $lab bench --scenario agent-killed --modes fastrepl-tcp --repeat 5 --out $R/agent-killed-$c
  run late-joiner-$c $lab bench --scenario late-joiner --modes fastrepl-tcp --repeat 5 --out $R/late-joiner-$c
fi
