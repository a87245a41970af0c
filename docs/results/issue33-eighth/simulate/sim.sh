#!/bin/bash
# Every file of this directory, from the repository's root (about 20 min on this 2-core machine, the
# 10 000-agent row most of it):  docs/results/issue33-eighth/simulate/sim.sh
# The join's window passed explicitly (--window), so that the rows do not move with its default: 16
# (the default before this pass) and 32, each with the tracker's starvation guard (2d90a68); 48 and
# 64 for the curve. The seventh pass's rows (docs/results/issue33-seventh/simulate) are the code
# before the guard, window 16.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
out=docs/results/issue33-eighth/simulate
cargo build --release -q -p fastrepl-lab
L=./target/release/fastrepl-lab
S="--link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --join-spread 30"
git rev-parse --short HEAD > $out/commit.txt
for w in 16 32; do
  # The issue's fleet rows: 5 % slow hosts, 1 % failures, joins over 30 s, 1 GiB.
  $L simulate --window $w --agents 4,8,64 $S --seeds 20 --json $out/spread30-w$w-seeds20.json > $out/spread30-w$w-seeds20.md
  $L simulate --window $w --agents 1000 $S --seeds 6 --json $out/spread30-1000-w$w-seeds6.json > $out/spread30-1000-w$w-seeds6.md
  # Even fan-out, 256 MiB; the bench's uneven fleet (4 agents, one at 20 Mbit/s, 128 MiB).
  $L simulate --window $w --agents 1,2,4,8 --link 100mbit --mib 256 --seeds 20 > $out/even-w$w-seeds20.md
  $L simulate --window $w --agents 1,4 --slow-hosts 1 --link 100mbit --mib 128 --seeds 100 --json $out/uneven-w$w-seeds100.json > $out/uneven-w$w-seeds100.md
done
$L simulate --window 32 --agents 10000 $S > $out/spread30-10000-w32.md
for w in 48 64; do
  $L simulate --window $w --agents 8,64 $S --seeds 20 > $out/spread30-w$w-seeds20.md
done
# The code before the guard (b8ba4ea, the seventh pass's last commit) at window 32: what the guard
# changes there (seed 2 at 64 agents: one block starved for 36 s). Built in a worktree under /tmp,
# removed at the end (about 2 min more).
pre=/tmp/fastrepl-b8ba4ea
[ -d $pre ] || git worktree add -q -f $pre b8ba4ea
trap 'git worktree remove --force $pre; git worktree prune' EXIT
(cd $pre && git checkout -q --detach b8ba4ea && CARGO_TARGET_DIR=$pre/target cargo build --release -q -p fastrepl-lab)
$pre/target/release/fastrepl-lab simulate --window 32 --agents 8,64 $S --seeds 20 --json $out/spread30-w32-before-guard-seeds20.json > $out/spread30-w32-before-guard-seeds20.md
