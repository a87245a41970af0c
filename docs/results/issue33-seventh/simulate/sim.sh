#!/bin/bash
# Every file of this directory, from the repository's root (about 10 min on this 2-core machine, the
# 10 000-agent row most of it):  docs/results/issue33-seventh/simulate/sim.sh
# The last part builds the code the issue was filed against (c97aa36) with this directory's patch
# (its simulator with --slow-hosts drawn from the seed, as today's), in a worktree under /tmp that it
# removes at the end (about 2 min more to build).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=docs/results/issue33-seventh/simulate
cargo build --release -q -p fastrepl-lab
L=./target/release/fastrepl-lab
S="--link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --join-spread 30"
git rev-parse --short HEAD > $out/commit.txt
# The issue's fleet rows: 5 % slow hosts, 1 % failures, joins over 30 s, 1 GiB.
$L simulate --agents 4,8,64 $S --seeds 20 --json $out/spread30-seeds20.json > $out/spread30-seeds20.md
$L simulate --agents 1000 $S --seeds 6 --json $out/spread30-1000-seeds6.json > $out/spread30-1000-seeds6.md
$L simulate --agents 10000 $S > $out/spread30-10000.md
# Joins spread alone; slow and failing hosts joining together.
$L simulate --agents 8,64 --link 100mbit --join-spread 30 --seeds 20 > $out/joins-alone-seeds20.md
$L simulate --agents 8,64 --link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --seeds 20 > $out/slow-fail-together-seeds20.md
# Even fan-out, 256 MiB; the bench's uneven fleet (4 agents, one at 20 Mbit/s, 128 MiB).
$L simulate --agents 1,2,4,8 --link 100mbit --mib 256 --seeds 20 > $out/even-seeds20.md
# 100 seeds: over seeds 1-20 the slow host is agent 3 ten times and agent 2 once; over 1-100 each of
# the four 21-30 times.
$L simulate --agents 1,4 --slow-hosts 1 --link 100mbit --mib 128 --seeds 100 --json $out/uneven-seeds100.json > $out/uneven-seeds100.md
# The uneven fleet on c97aa36, the code the issue was filed against.
pre=/tmp/fastrepl-c97aa36
[ -d $pre ] || git worktree add -q -f $pre c97aa36
trap 'git worktree remove --force $pre; git worktree prune' EXIT
(cd $pre && git checkout -q --detach c97aa36 && git checkout -q -- . && git apply "$OLDPWD/$out/c97aa36-slow-hosts.patch" && CARGO_TARGET_DIR=$pre/target cargo build --release -q -p fastrepl-lab)
{
  echo "c97aa36 with c97aa36-slow-hosts.patch: $pre/target/release/fastrepl-lab simulate --agents 4 --slow-hosts 1 --link 100mbit --mib 128 --seed S, one line per seed (that commit's table: agents | T(N) s | T(N)/T(1) | slow hosts ÷ their own bound | relay copies | max agent upload copies | slowest agent s (slow host?) | failed | unfinished | refusals per block per agent)"
  for s in $(seq 1 100); do
    row=$($pre/target/release/fastrepl-lab simulate --agents 4 --slow-hosts 1 --link 100mbit --mib 128 --seed $s | tail -1)
    echo "seed $s: $row"
  done
} > $out/uneven-c97aa36-seeds100.md
