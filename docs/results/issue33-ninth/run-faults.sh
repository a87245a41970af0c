#!/usr/bin/env bash
# Issue 33, ninth pass, after run.sh in the same sitting: item 3's "agent-killed and late-joiner no
# worse" (not run since issue 22). Four replicas at 1 Gbit/s, 256 MiB, x5, this pass's code and the
# eighth pass's last commit (91dabbb, built in a worktree as run.sh says) alternating by scenario.
set -u
cd "$(dirname "$0")/../../.."
R=$PWD/docs/results/issue33-ninth
c=${C:-$(git rev-parse --short=7 HEAD)}  # C: the commit whose build runs, when later commits touched only docs
old=/tmp/fastrepl-91dabbb
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
for s in agent-killed late-joiner; do
  run $s-$c ./target/release/fastrepl-lab bench --scenario $s --modes fastrepl-tcp --repeat 5 --out $R/$s-$c
  (cd $old && run $s-91dabbb ./target/release/fastrepl-lab bench --scenario $s --modes fastrepl-tcp --repeat 5 --out $R/$s-91dabbb)
done
