#!/usr/bin/env bash
# Installs what ferrox needs to build and test, on a fresh Debian 12 machine. Idempotent:
# packages already present are not touched, so a second run costs a second.
set -euo pipefail

APT_PACKAGES=(
  g++ cmake ninja-build ccache pkg-config make
  libgtest-dev libgmock-dev libbenchmark-dev
  libpcre2-dev nlohmann-json3-dev libxxhash-dev libboost-dev libsimde-dev
  # The Responses store under --state-dir (src/server/response_store_sqlite.cc).
  libsqlite3-dev
  python3 python3-pip unzip
  # The web page's libraries, embedded into the binary at build time (webui/, issue 48).
  libjs-marked libjs-highlight.js libjs-katex node-dompurify
)
# `make test` only: the browser the web page's tests drive (tests/e2e/test_webui.py).
if [ "${1:-}" = "--test" ]; then
  APT_PACKAGES+=(chromium chromium-driver)
  # The Redis Responses store's tests start their own (tests/e2e/test_response_state.py).
  APT_PACKAGES+=(redis-server)
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python packages for the tests (real clients, reference implementations): only with --test
# (`make test`); building and serving need none of them.
if [ "${1:-}" = "--test" ] && ! python3 -c "import openai, anthropic, pytest, httpx, gguf, jsonschema, selenium" 2>/dev/null; then
  echo "setup: installing Python test packages"
  req="$(dirname "$0")/requirements-test.txt"
  # A Debian system Python refuses pip installs (PEP 668) unless told it may.
  python3 -m pip install --quiet --disable-pip-version-check -r "$req" ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages -r "$req"
fi
