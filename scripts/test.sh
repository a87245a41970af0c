#!/usr/bin/env bash
# The test command: set-up (idempotent), the whole test suite (real servers, relays and agents over
# real sockets), then a short run of every fuzz target where a nightly toolchain exists.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cargo test --workspace --release
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"
