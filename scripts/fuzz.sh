#!/usr/bin/env bash
# Run every cargo-fuzz target for N seconds (default 15). Needs a nightly toolchain (rustup); installs
# cargo-fuzz from crates.io if missing. Without nightly it says so and exits 0: the same targets'
# invariants also run on stable in the test suite (`fuzz_smoke` tests).
set -euo pipefail
secs=${1:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "[fuzz] no nightly toolchain: cargo fuzz skipped (stable fuzz_smoke tests ran in the suite)"
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "[fuzz] installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
for t in resp replication capture wire tracker auth data_path sentinel metrics; do
  mkdir -p "corpus/$t"
  echo "[fuzz] $t for ${secs}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 2>&1 | grep -E '^(stat::number_of_executed_units|Done|==[0-9]+==|SUMMARY)' || true
  # A crash makes cargo fuzz exit non-zero and leaves an artifact: fail loudly.
  if ls "artifacts/$t"/crash-* >/dev/null 2>&1; then echo "[fuzz] $t found a crash: fuzz/artifacts/$t"; exit 1; fi
done
