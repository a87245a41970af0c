#!/usr/bin/env bash
# Run every cargo-fuzz target for N seconds (default 15). Needs a nightly toolchain (rustup); installs
# cargo-fuzz from crates.io if missing. Every target runs even after one crashes, and each ends with
# one line scripts/test.sh counts: `[fuzz] <target> ok`, `[fuzz] <target> FAILED: <why>` or
# `[fuzz] <target> skipped: <why>`. Exits non-zero when any target failed. Without nightly every
# target is reported skipped and it exits 0: the same targets' invariants also run on stable in the
# test suite (`fuzz_smoke` tests).
set -euo pipefail
secs=${1:-15}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"
targets=(resp replication capture wire tracker auth data_path sentinel metrics cluster ucx_messages codec)
if ! cargo +nightly --version >/dev/null 2>&1; then
  for t in "${targets[@]}"; do echo "[fuzz] $t skipped: no nightly toolchain (its stable fuzz_smoke test ran in the suite)"; done
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "[fuzz] installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  # An artifact from an earlier run is not this run's finding: set it aside so it cannot decide.
  if ls "artifacts/$t"/crash-* >/dev/null 2>&1; then
    mkdir -p "artifacts/$t/old" && mv "artifacts/$t"/crash-* "artifacts/$t/old/"
  fi
  echo "[fuzz] running $t for ${secs}s"
  rc=0
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 >"$out" 2>&1 || rc=$?
  grep -E '^(stat::number_of_executed_units|Done|==[0-9]+==|SUMMARY)' "$out" || true
  if ls "artifacts/$t"/crash-* >/dev/null 2>&1; then
    echo "[fuzz] $t FAILED: crash, input in fuzz/artifacts/$t"; failed=$((failed + 1))
  elif (( rc != 0 )); then
    tail -n 20 "$out"
    echo "[fuzz] $t FAILED: cargo fuzz exited $rc"; failed=$((failed + 1))
  else
    echo "[fuzz] $t ok"
  fi
done
(( failed == 0 ))
