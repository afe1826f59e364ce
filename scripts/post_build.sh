#!/usr/bin/env bash
# trunk's post_build hook (trunk.toml; trunk runs a stage's hooks at once, so both steps are in
# this one script, in order):
# 1. the relaxed SIMD build (below);
# 2. the service worker's VERSION: a hash of every other file of the build, so each build that
#    changes anything is a new version, which returning visitors' browsers install whole (web/sw.js).
#
# 1. The page's second wasm build, with WebAssembly relaxed
# SIMD (the `relaxed-simd` feature: the CPU engine's int8 products with
# `i32x4.relaxed_dot_i8x16_i7x16_add`, see src/cpu/matmul.rs), written next to trunk's own as
# webnmt_relaxed.js + webnmt_relaxed_bg.wasm. web/worker.js loads it where the browser validates
# relaxed SIMD (current Chromium-based browsers) and the plain simd128 build elsewhere. Where it
# validates, the service worker caches both, and without WebGPU the worker loads both to time
# them (README, "Size").
#
# Its own target directory: both builds produce `webnmt.wasm`, so in one directory every build
# would relink the other's (or, worse, find the other's artifact and call it fresh). The first
# build compiles the wasm dependencies a second time (a few minutes); later ones only this crate.
# Runs with trunk's environment (TRUNK_PROFILE, TRUNK_STAGING_DIR, and WASM_ENV's variables).
set -euo pipefail
: "${TRUNK_STAGING_DIR:?run by trunk (trunk build --config trunk.toml), which sets TRUNK_STAGING_DIR}"
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-target}/wasm-relaxed"
profile="${TRUNK_PROFILE:-release}"
flags=(--locked --lib --target wasm32-unknown-unknown --features web,relaxed-simd --target-dir "$target_dir")
[ "$profile" = release ] && flags+=(--release)
cargo build "${flags[@]}"
wasm-bindgen --target web --no-typescript --out-dir "$TRUNK_STAGING_DIR" --out-name webnmt_relaxed \
  "$target_dir/wasm32-unknown-unknown/$profile/webnmt.wasm"

# 2. The service worker's version.
sw="$TRUNK_STAGING_DIR/sw.js"
version=$(cd "$TRUNK_STAGING_DIR" && find . -type f ! -path ./sw.js -print0 | LC_ALL=C sort -z |
  xargs -0 sha256sum | sha256sum | cut -c1-16)
grep -q "^const VERSION = 'unbuilt';$" "$sw" || {
  echo "post_build.sh: $sw has no line \"const VERSION = 'unbuilt';\" to stamp" >&2
  exit 1
}
sed -i "s/^const VERSION = 'unbuilt';\$/const VERSION = '$version';/" "$sw"
echo "post_build.sh: service worker version $version"
