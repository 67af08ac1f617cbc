#!/usr/bin/env python3
"""Converts a sentence-transformers BERT directory (all-MiniLM-L6-v2) to GGUF the way
llama.cpp's convert_hf_to_gguf.py does for BertModel (written from its documented output:
general.architecture = bert, the bert.* keys, its tensor names, the WordPiece vocabulary in
llama.cpp's convention - "##x" pieces become "x", word-initial ones get a U+2581 prefix -
tokenizer.ggml.model = bert), with the `gguf` package from PyPI. Used by the e2e tests and
bench/bench_embeddings.py to serve the same model from GGUF.

    python3 scripts/golden/minilm_to_gguf.py models/all-MiniLM-L6-v2 out.gguf [--outtype f32|f16]
"""
import argparse, json, os, struct, sys

import numpy as np
import gguf


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    dt = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            b, e = t["data_offsets"]
            out[name] = np.frombuffer(raw[8 + n + b : 8 + n + e], dtype=dt[t["dtype"]]).reshape(t["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", choices=["f32", "f16"], default="f16")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.model_dir, "config.json")))
    tj = json.load(open(os.path.join(a.model_dir, "tokenizer.json")))
    pool = json.load(open(os.path.join(a.model_dir, "1_Pooling", "config.json")))
    W = load_safetensors(os.path.join(a.model_dir, "model.safetensors"))

    w = gguf.GGUFWriter(a.out, "bert")
    w.add_name(os.path.basename(os.path.normpath(a.model_dir)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.CLS if pool.get("pooling_mode_cls_token") else gguf.PoolingType.MEAN)
    w.add_file_type(1 if a.outtype == "f16" else 0)

    vocab = tj["model"]["vocab"]
    n_vocab = cfg["vocab_size"]
    tokens = [""] * n_vocab
    for t, i in vocab.items():
        tokens[i] = t
    special = {t["content"] for t in tj.get("added_tokens", []) if t.get("special")}
    toktypes = []
    for i, t in enumerate(tokens):
        if t in special:
            toktypes.append(gguf.TokenType.CONTROL)
        else:
            toktypes.append(gguf.TokenType.NORMAL)
            tokens[i] = t[2:] if t.startswith("##") else "\u2581" + t
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(toktypes)
    w.add_token_type_count(cfg.get("type_vocab_size", 2))
    ids = {t: i for t, i in vocab.items()}
    w.add_unk_token_id(ids["[UNK]"])
    w.add_sep_token_id(ids["[SEP]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["[CLS]"])
    w.add_mask_token_id(ids["[MASK]"])
    # [CLS] text [SEP]: llama.cpp's BERT vocabulary adds [CLS] as BOS and [SEP] as the separator.
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_bool("tokenizer.ggml.add_sep_token", True)
    w.add_bos_token_id(ids["[CLS]"])

    ftype = np.float16 if a.outtype == "f16" else np.float32

    def put(name, arr, keep_f32=False):
        arr = np.ascontiguousarray(arr.astype(np.float32 if (keep_f32 or arr.ndim == 1) else ftype))
        w.add_tensor(name, arr)

    put("token_embd.weight", W["embeddings.word_embeddings.weight"])
    put("position_embd.weight", W["embeddings.position_embeddings.weight"])
    put("token_types.weight", W["embeddings.token_type_embeddings.weight"], keep_f32=True)
    put("token_embd_norm.weight", W["embeddings.LayerNorm.weight"])
    put("token_embd_norm.bias", W["embeddings.LayerNorm.bias"])
    names = {
        "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
        "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
        "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm",
    }
    for i in range(cfg["num_hidden_layers"]):
        for hf, gg in names.items():
            for part in ("weight", "bias"):
                put(f"blk.{i}.{gg}.{part}", W[f"encoder.layer.{i}.{hf}.{part}"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
