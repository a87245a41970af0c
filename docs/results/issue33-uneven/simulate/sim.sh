#!/bin/sh
# The simulator's rows of docs/results/issue33-uneven (run from the repository's root after
# `cargo build --release -p fastrepl-lab`; OLD=path to a fastrepl-lab built from c97aa36 with only
# simulate.rs's --slow-hosts added, for the "before" rows).
set -e
D=docs/results/issue33-uneven/simulate
LAB=${LAB:-./target/release/fastrepl-lab}
S="--link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --join-spread 30"
$LAB simulate --agents 1,2,4,8,64,1000 $S --json $D/spread30.json > $D/spread30.md
for s in 2 3; do $LAB simulate --agents 4,8,64 $S --seed $s --json $D/spread30-seed$s.json > $D/spread30-seed$s.md; done
$LAB simulate --agents 10000 $S --json $D/spread30-10000.json > $D/spread30-10000.md
for s in 1 2 3 4 5; do $LAB simulate --agents 1,2,4,8 --link 100mbit --mib 256 --seed $s --json $D/even-seed$s.json > $D/even-seed$s.md; done
$LAB simulate --agents 1,4 --slow-hosts 1 --link 100mbit --mib 128 --json $D/uneven.json > $D/uneven.md
if [ -n "$OLD" ]; then
  $OLD simulate --agents 1,4 --slow-hosts 1 --link 100mbit --mib 128 --json $D/uneven-before.json > $D/uneven-before.md
  $OLD simulate --agents 1,2,4,8,64,1000 $S --json $D/spread30-before.json > $D/spread30-before.md
fi
# What the spread rows' time is made of: joins spread alone, and slow hosts with failures joining together.
$LAB simulate --agents 8,64,1000 --link 100mbit --join-spread 30 --json $D/spread30-only.json > $D/spread30-only.md
$LAB simulate --agents 8,64,1000 --link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --json $D/slow-fail-together.json > $D/slow-fail-together.md
if [ -n "$OLD" ]; then
  $OLD simulate --agents 8,64,1000 --link 100mbit --join-spread 30 --json $D/spread30-only-before.json > $D/spread30-only-before.md
  $OLD simulate --agents 8,64,1000 --link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --json $D/slow-fail-together-before.json > $D/slow-fail-together-before.md
fi
