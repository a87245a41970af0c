#!/usr/bin/env bash
# Issue 33, ninth pass: the even fan-out at 100 Mbit/s, x5, on this pass's code (the window widened by
# the serve cache's unused room, the serve cache's own choice of old blocks, the slow agent's copy of
# a dropped block) at N = 1, 2, 4, 8, and the eighth pass's last commit (91dabbb) at N = 1 and 8 beside
# it, in one sitting, with nothing else on the machine. Every join at its default window (32).
# The uneven fleet is not run again: at 128 MiB (32 blocks) the window covered the whole snapshot
# before and the cache never fills, so none of the changes acts there.
# Build first: cargo build --release -p cli -p fastrepl-lab, and 91dabbb in a worktree:
#   git worktree add /tmp/fastrepl-91dabbb 91dabbb
#   (cd /tmp/fastrepl-91dabbb && CARGO_TARGET_DIR=/tmp/fastrepl-91dabbb/target cargo build --release -p cli -p fastrepl-lab)
set -u
cd "$(dirname "$0")/../../.."
R=$PWD/docs/results/issue33-ninth
c=$(git rev-parse --short=7 HEAD)
old=/tmp/fastrepl-91dabbb
run() { local name=$1; shift; uptime > $R/$name-uptime-start.txt; "$@" > $R/$name.log 2>&1; echo "exit $?" >> $R/$name.log; uptime > $R/$name-uptime-end.txt; }
run fanout-100mbit-$c ./target/release/fastrepl-lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,2,4,8 --repeat 5 --out $R/fanout-100mbit-$c
(cd $old && run fanout-n8-91dabbb ./target/release/fastrepl-lab bench --scenario fanout --links 100mbit --values 64 --modes fastrepl-tcp --replicas 1,8 --repeat 5 --out $R/fanout-n8-91dabbb)
