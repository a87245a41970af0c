#!/usr/bin/env bash
# Issue 33, fifth pass: the code kept (8ad96dd: 1a88f71 plus the end-of-pull cut), one run of this script with
# nothing else running on the machine: uneven x5 and even fan-out at 100 Mbit/s x5.
set -u
cd "$(dirname "$0")/../../.."
R=docs/results/issue33-fifth/final
lab=./target/release/fastrepl-lab
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
mkdir -p $R/uneven/logs
run uneven env FASTREPL_BENCH_JOIN_LOG=debug FASTREPL_BENCH_KEEP_LOGS=$R/uneven/logs $lab bench --scenario uneven --repeat 5 --out $R/uneven
run fanout-100mbit $lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit
