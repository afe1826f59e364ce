#!/usr/bin/env bash
# Runs every check: formatting, clippy (native and wasm), the native tests (GPU tests on the
# machine's adapter, lavapipe in CI), the wasm build of the page, and the browser tests in headless
# Chromium with SwiftShader WebGPU. Installs missing tools first. CI runs exactly this.
#
# REQUIRE_GPU=1 (the default here) makes a missing GPU adapter a failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

export REQUIRE_GPU="${REQUIRE_GPU:-1}"
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then # lavapipe complains on every device open without it
  export XDG_RUNTIME_DIR="$PWD/target/xdg-runtime"
  mkdir -p -m 700 "$XDG_RUNTIME_DIR"
fi

summary=()
step() {
  local name="$1"
  shift
  printf '\n\033[1m==> %s\033[0m\n' "$name"
  local t0=$SECONDS
  if ! "$@"; then
    printf '\n\033[1;31mFAILED: %s\033[0m\n' "$name" >&2
    exit 1
  fi
  summary+=("$(printf '%5ss  %s' $((SECONDS - t0)) "$name")")
}

one_wgpu() { # burn-wgpu and our engine must share one wgpu
  local n
  n=$(grep -c '^name = "wgpu"$' Cargo.lock)
  [ "$n" = 1 ] || { echo "Cargo.lock holds $n versions of wgpu; keep only the one burn-wgpu uses" >&2; return 1; }
}

wasm_clippy() {
  if [ ${#WASM_ENV[@]} -eq 0 ]; then
    cargo clippy --locked --target wasm32-unknown-unknown --features web -- -D warnings &&
      cargo clippy --locked --target wasm32-unknown-unknown --features web,relaxed-simd -- -D warnings
  else # Debian's rustc-web ships no clippy: type-check only
    env "${WASM_ENV[@]}" cargo check --locked --target wasm32-unknown-unknown --features web &&
      env "${WASM_ENV[@]}" cargo check --locked --target wasm32-unknown-unknown --features web,relaxed-simd
  fi
}

step "setup" scripts/setup.sh test
source target/toolchain.env
step "one wgpu in Cargo.lock" one_wgpu
step "cargo fmt --check" cargo fmt --check
step "clippy (native, with train)" cargo clippy --locked --all-targets --features train -- -D warnings
step "clippy (wasm)" wasm_clippy
# Release: burn trains far too slowly unoptimised, and `train` shares these artifacts.
step "native tests (REQUIRE_GPU=$REQUIRE_GPU)" cargo test --locked --release --features train
step "wasm build (trunk)" env "${WASM_ENV[@]}" trunk build --config trunk.toml
step "browser tests" node --test tests/browser/*.test.mjs
printf '\n\033[1mAll checks passed in %ss:\033[0m\n' $((SECONDS - start))
printf '%s\n' "${summary[@]}"
