#!/usr/bin/env bash
# Lints as the gate, not advice: rustfmt (rustfmt.toml's width) over the workspace and the fuzz
# crate, and clippy over every target of the workspace with warnings as errors, so that the next
# warning fails where it is born. Prints one line per check: "lint: <name> ok|FAILED", then what
# failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fail=0
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then
    echo "lint: $name ok"
  else
    echo "lint: $name FAILED"; echo "$out" | tail -n 60; fail=1
  fi
}
check "rustfmt" cargo fmt --all --check
check "rustfmt (fuzz)" cargo fmt --manifest-path fuzz/Cargo.toml --check
# --release: the check artifacts of the release build and of the product check (scripts/product_check.sh)
# are reused, where a dev-profile clippy builds every dependency again (minutes on two cores).
check "clippy -D warnings" cargo clippy --release --workspace --all-targets --quiet -- -D warnings
exit $fail
