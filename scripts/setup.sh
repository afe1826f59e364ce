#!/usr/bin/env bash
# Installs the tools webnmt needs, skipping what is already there. Safe to run again: on a
# ready machine it takes seconds.
#
#   scripts/setup.sh build   the page's toolchain: the wasm32 target (rustup, or Debian's
#                            rustc-web + rust-web-src with build-std when rustup cannot download),
#                            wasm-bindgen-cli at the crate's exact version, trunk
#   scripts/setup.sh test    all of the above, plus Debian chromium and lavapipe
#                            (mesa-vulkan-drivers) and the npm packages of tests/package-lock.json
#
# Writes target/toolchain.env, which the other scripts source: it says how to build for wasm.
set -euo pipefail
cd "$(dirname "$0")/.."
# cargo install puts trunk and wasm-bindgen here; a shell that never read ~/.cargo/env lacks it.
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
mode="${1:-test}"
case "$mode" in build | test) ;; *) echo "usage: scripts/setup.sh [build|test]" >&2; exit 2 ;; esac

TRUNK_VERSION=0.22.1

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

# wasm-bindgen-cli must be exactly the version of the crate (pinned with `=` in Cargo.toml).
WASM_BINDGEN_VERSION=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/[^0-9.]/, ""); print }' Cargo.lock)
[ -n "$WASM_BINDGEN_VERSION" ] || die "Cargo.lock names no wasm-bindgen version; run from a complete checkout"

apt_updated=0
apt_install() { # packages not yet installed are installed
  local missing=() SUDO=""
  for p in "$@"; do
    # `dpkg -s` also succeeds for a removed package whose configuration files are left.
    # One line per installed architecture (a multi-arch package has several).
    dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -x installed >/dev/null || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install them with your package manager"
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "need root or sudo to install ${missing[*]}; install them as root, then run this again"
    SUDO=sudo
  fi
  if [ $apt_updated = 0 ]; then log "apt-get update"; $SUDO apt-get update -qq; apt_updated=1; fi
  log "apt-get install ${missing[*]}"
  # Through env: sudo's env_reset would drop a DEBIAN_FRONTEND set in front of it.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# --- Debian packages: the browser for the browser tests, lavapipe for native GPU tests.
if [ "$mode" = test ]; then
  if command -v dpkg >/dev/null; then
    apt_install chromium mesa-vulkan-drivers libvulkan1
  else
    log "not a Debian system: install Chromium (or set CHROMIUM=/path/to/chrome) and a Vulkan driver yourself"
  fi
fi

# --- The wasm32 target: rustup first, Debian's rustc-web with build-std as the fallback.
mkdir -p target
env_file=target/toolchain.env
# grep without -q reads all of rustup's output (with -q, rustup can fail writing to a closed pipe).
if rustup target list --installed 2>/dev/null | grep -x wasm32-unknown-unknown >/dev/null; then
  echo "WASM_ENV=()" > "$env_file"
elif command -v rustup >/dev/null && rustup target add wasm32-unknown-unknown; then
  echo "WASM_ENV=()" > "$env_file"
else
  log "rustup could not add wasm32-unknown-unknown; falling back to Debian's rustc-web with build-std"
  apt_install rustc-web cargo-web rust-web-src rust-web-llvm
  cat > "$env_file" <<'ENV'
# Debian's rustc-web builds std for wasm itself; a separate target dir because it is another rustc.
WASM_ENV=(RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_UNSTABLE_BUILD_STD=std,panic_abort CARGO_TARGET_DIR=target-wasm)
ENV
fi

# --- wasm-bindgen-cli at exactly the crate's version (trunk refuses any other and cannot download).
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
  log "cargo install wasm-bindgen-cli $WASM_BINDGEN_VERSION (about 3 minutes)"
  # Not --locked: its lock file names a crate version the registry mirror lacks.
  cargo install -q wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
  found=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
  [ "$found" = "$WASM_BINDGEN_VERSION" ] || die "the wasm-bindgen first on PATH ($(command -v wasm-bindgen)) is ${found:-not runnable}, not $WASM_BINDGEN_VERSION: remove it or put ${CARGO_HOME:-$HOME/.cargo}/bin first in PATH"
fi

# --- trunk.
if [ "$(trunk --version 2>/dev/null | awk '{print $2}')" != "$TRUNK_VERSION" ]; then
  log "cargo install trunk $TRUNK_VERSION (about 13 minutes on 2 cores)"
  cargo install -q trunk --version "$TRUNK_VERSION" --locked --ignore-rust-version --force
  found=$(trunk --version 2>/dev/null | awk '{print $2}' || true)
  [ "$found" = "$TRUNK_VERSION" ] || die "the trunk first on PATH ($(command -v trunk)) is ${found:-not runnable}, not $TRUNK_VERSION: remove it or put ${CARGO_HOME:-$HOME/.cargo}/bin first in PATH"
fi

# --- npm packages for the browser tests (playwright-core drives Debian's chromium; it never downloads a browser).
# A copy of the lock file inside node_modules records what was installed.
if [ "$mode" = test ] && ! cmp -s tests/package-lock.json tests/node_modules/.installed-lock.json; then
  # playwright-core needs Node 20 or later (Debian 12's own nodejs is 18).
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || true)
  found=${node_major:+Node $node_major}
  [ -n "$node_major" ] && [ "$node_major" -ge 20 ] ||
    die "the browser tests need Node.js 20 or later (found: ${found:-no node}); install it, then run this again"
  command -v npm >/dev/null || die "the browser tests need npm beside Node.js $node_major; install it, then run this again"
  log "npm ci in tests/"
  (cd tests && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  cp tests/package-lock.json tests/node_modules/.installed-lock.json
fi

log "tools ready"
