#!/bin/bash
# The simulator's rows for issue22-cut-through (run from the repository's root).
cd "$(dirname "$0")/../../../.."
B=./target/release/fastrepl-lab
D=docs/results/issue22-cut-through/simulate
mkdir -p $D
for s in 1 2 3 4 5; do
  $B simulate --agents 1,2,4,8 --link 100mbit --mib 256 --seed $s --json $D/compare-seed$s.json > $D/compare-seed$s.md 2>&1
  $B simulate --agents 1,2,4,8 --link 100mbit --mib 256 --seed $s --queue-ms 20 --json $D/compare-queue20-seed$s.json > $D/compare-queue20-seed$s.md 2>&1
done
timeout 1200 $B simulate --agents 1,8,64,1000 --json $D/uniform.json > $D/uniform.md 2>&1
timeout 1200 $B simulate --agents 1,8,64,1000,10000 --queue-ms 1 --json $D/uniform-shallow.json > $D/uniform-shallow.md 2>&1
timeout 1500 $B simulate --agents 1,2,4,8,64,1000 --link 100mbit --slow-fraction 0.05 --fail-fraction 0.01 --join-spread 30 --json $D/100mbit-spread30.json > $D/100mbit-spread30.md 2>&1
echo done > $D/DONE
