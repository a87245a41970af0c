#!/usr/bin/env bash
# The test command: set-up (idempotent), the whole test suite (real servers, relays and agents over
# real sockets), then a short run of every fuzz target where a nightly toolchain exists, and a
# one-line summary of the suite's counts.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --release 2>&1 | tee "$log"
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
sum() { grep -E '^test result:' "$log" | grep -oE "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
echo "summary: $(sum passed) passed, $(sum failed) failed, $(sum ignored) skipped"
