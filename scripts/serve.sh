#!/usr/bin/env bash
# Builds the web app (release wasm) and serves it on http://127.0.0.1:${PORT:-8080}/.
# Installs the page's toolchain first if it is missing. Ctrl+C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
port="${PORT:-8080}"
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] ||
  { echo "PORT=$port is not a port number (1-65535)" >&2; exit 2; }
# trunk binds only after the whole build: find a busy port before it.
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "port $port on 127.0.0.1 is in use: stop what serves there, or choose another with PORT=..." >&2
  exit 1
fi
scripts/setup.sh build
source target/toolchain.env
printf '\n\033[1mwebnmt will be served at http://127.0.0.1:%s/ once the build below finishes.\033[0m\n\n' "$port"
exec env "${WASM_ENV[@]}" trunk serve --config trunk.toml --address 127.0.0.1 --port "$port" --no-autoreload
