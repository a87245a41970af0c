#!/usr/bin/env bash
# Issue 33, fourth pass: the final figures again, after a moved read rates its peer (e837eff, ab7ef0f, 230f9cd: the bench ran on 230f9cd) (one run of this script, nothing else running on the
# machine): uneven x5, even fan-out at 100 Mbit/s x5, agent-killed x5, late-joiner x5.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-fourth
lab=./target/release/fastrepl-lab
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
mkdir -p $R/uneven/logs
run uneven env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven/logs $lab bench --scenario uneven --repeat 5 --out $R/uneven
run fanout-100mbit $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit
run agent-killed $lab bench --scenario agent-killed --modes fastrepl-tcp --repeat 5 --out $R/agent-killed
run late-joiner $lab bench --scenario late-joiner --modes fastrepl-tcp --repeat 5 --out $R/late-joiner
