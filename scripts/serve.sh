#!/usr/bin/env bash
# Builds the web app (release wasm) and serves it on http://127.0.0.1:${PORT:-8080}/.
# Installs the page's toolchain first if it is missing. Ctrl+C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
source target/toolchain.env
port="${PORT:-8080}"
printf '\n\033[1mwebnmt will be served at http://127.0.0.1:%s/ once the build below finishes.\033[0m\n\n' "$port"
exec env "${WASM_ENV[@]}" trunk serve --config trunk.toml --address 127.0.0.1 --port "$port" --no-autoreload
