#!/usr/bin/env bash
# llama.cpp's own server test suite (tools/server/tests of the llama.cpp vendored in
# llama-cpp-python 0.3.36's sdist) against `ferrox serve`. Not part of `make test` (minutes).
#
#   bench/llamacpp_suite/run.sh [pytest args...]      e.g. unit/test_completion.py -x
#
# FERROX_BIN (default build/bin/ferrox) is the binary; PORT (default 18480) the port the
# harness starts servers on. The sdist is fetched with pip and unpacked under /tmp (no
# third-party source in this repository); the suite's requirements go into a venv in /tmp.
# The harness is changed only by ferrox_suite_adapter.py (local models for the hub's) and
# ./llama-server (runs `ferrox serve` with the harness's llama-server arguments).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
WORK=${LLAMACPP_SUITE_WORK:-/tmp/llamacpp-suite}
VERSION=0.3.36
SRC="$WORK/llama_cpp_python-$VERSION"
TESTS="$SRC/vendor/llama.cpp/tools/server/tests"
VENV="$WORK/venv"

mkdir -p "$WORK"
if [ ! -d "$TESTS" ]; then
    python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK/sdist"
    tar xzf "$WORK/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
fi
if [ ! -x "$VENV/bin/pytest" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -r "$TESTS/requirements.txt"
fi

export FERROX_ROOT="$ROOT"
export FERROX_BIN=$(realpath "${FERROX_BIN:-$ROOT/build/bin/ferrox}")
export LLAMA_SERVER_BIN_PATH="$HERE/llama-server"
export LLAMACPP_SUITE_DIR="$TESTS"
export PORT=${PORT:-18480}
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
cd "$TESTS"
if [ $# -eq 0 ]; then set -- unit; fi
# The suite's own defaults (tests.sh): slow tests (7B models from the hub) left out.
# Per-file counts from the JUnit report at the end ($WORK/results.xml).
rc=0
"$VENV/bin/pytest" -p ferrox_suite_adapter -m "not slow" -q -rs -p no:cacheprovider \
    --tb=short --junitxml="$WORK/results.xml" "$@" || rc=$?
python3 "$HERE/summarize.py" "$WORK/results.xml"
exit $rc
