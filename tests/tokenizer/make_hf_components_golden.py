#!/usr/bin/env python3
"""Golden data for hf_components_golden_test: tokenizer.json files that cover each HF
`tokenizers` component (normalizers, pre-tokenizers, models, added-token options, decoders,
post-processors), built with the `tokenizers` package itself (tiny models trained on
tests/tokenizer/corpus.txt, or constructed from a trained model's vocabulary), and what HF
gives on INPUTS: ids (add_special_tokens=True) and decode with and without special tokens.

    pip install tokenizers==0.23.3 sentencepiece==0.2.3
    python3 tests/tokenizer/make_hf_components_golden.py

Writes tests/tokenizer/golden/hf_components/<name>.json (the tokenizer) and
<name>.expected.json ({"tokenizers": version, "inputs": [...], "ids": [[...]],
"decode": [...], "decode_skip_special": [...]}).
HF's trainers are not bit-reproducible (hash-map order), so a re-run rewrites the files with
other tiny vocabularies; each run's tokenizers and expectations agree with each other.
"""

import json
import os

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "golden", "hf_components")

with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8") as f:
    CORPUS = [l.rstrip("\n") for l in f][:120]

INPUTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world",
    " Hello world",
    "  Hello  world  ",
    "HELLO WORLD!!! hello...world???",
    "I'LL be there at 10:30 a.m., DON'T be late!",
    "Mr. O'Neil's café serves crème brûlée and piña coladas.",
    "Über Straße, Größe und Fußgänger: Ärger, Öl.",
    "decomposed: e\u0301 a\u0308 n\u0303 ",
    "İstanbul ǅemal ΣΊΣΥΦΟΣ",
    "The price is $1,234.56 (€1.134,20 or ¥182,000).",
    "Version 2.0.1-beta+build.123 on 2024-03-15T12:34:56Z",
    "12345678901234567890 and ²³ ½ ٣٤٥",
    "\tA line starting with a tab",
    "Tabs\tbetween\twords\t\tdouble",
    "Mixed   spacing \t  and\u00a0nbsp\u3000ideographic",
    "trailing spaces   ",
    "中文分词测试，你好世界。",
    "日本語のテキストです。カタカナ",
    "한국어 텍스트 입니다",
    "Emoji 😀👍🏽 and 👨‍👩‍👧 family",
    "zero\u200bwidth\u200djoiner",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "snake_case_name and kebab-case-name and CamelCaseName",
    "a-b-c--d---e",
    "punctuation: ;;; ... !!! ??? ,,, (((x))) [y] {z}",
    "x" * 60,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "hello <mask> world",
    "hello<mask>world",
    "say [X]   then more",
    "hellohello hello, hello_x hello",
    "World WORLD world",
    "<s> inside </s> text",
    "<|endoftext|>after",
    "",
    " ",
    "   ",
    "\n",
    "compat: \ufb01\ufb02 \u2460 \u3300 \uff26\uff55\uff4c\uff4c \uff8a\uff9d\uff76\uff78 x\u00b2 \u210c \ufdfa",
    "charsmap: A \uff21 \ufb01 e\u0301 \u00c5 \u2460 x\u3000y a\r\nb \u4e00 \uff21\u0301 \U0001F600\u0301 e\u0301\u0301",
    "scripts: abcабв中文ひらがなカタカナー한국어ελληνικά١٢٣ a\u0301 z\u0378z",
]

ADDED = [
    AddedToken("<mask>", lstrip=True, special=True),
    AddedToken("[X]", rstrip=True, special=False),
    AddedToken("hello", single_word=True, special=False, normalized=True),
    AddedToken("World", normalized=False, special=False),
    AddedToken("<|endoftext|>", special=True),
]


def train_bpe(pre, vocab_size=300, **kw):
    tok = Tokenizer(models.BPE(unk_token="<unk>", **kw))
    tok.pre_tokenizer = pre
    opts = {k: v for k, v in kw.items() if k in ("continuing_subword_prefix", "end_of_word_suffix")}
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False, limit_alphabet=60, **opts)
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def bytelevel_bpe(pre, vocab_size=360):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_unigram(pre, vocab_size=450, byte_fallback=False):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, show_progress=False,
                                      special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      max_piece_length=8)
    tok.train_from_iterator(CORPUS, trainer)
    if byte_fallback:
        m = json.loads(tok.to_str())["model"]
        vocab = [tuple(x) for x in m["vocab"]] + [("<0x%02X>" % b, 0.0) for b in range(256)]
        tok.model = models.Unigram(vocab, m["unk_id"], byte_fallback=True)
    return tok


def train_wordpiece(pre, normalizer=None, vocab_size=300):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, show_progress=False,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                        limit_alphabet=80)
    tok.train_from_iterator(CORPUS, trainer)
    tok.decoder = decoders.WordPiece()
    return tok


def with_model(tok, **kw):
    """Rebuilds tok's BPE model with the same vocab/merges and extra options."""
    j = json.loads(tok.to_str())
    m = j["model"]
    vocab = m["vocab"]
    merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ", 1)) for x in m["merges"]]
    if kw.pop("add_bytes", False):
        for b in range(256):
            vocab.setdefault("<0x%02X>" % b, len(vocab))
    tok.model = models.BPE(vocab, merges, unk_token=m.get("unk_token"), **kw)
    return tok


def proto_fields(buf):
    """(field number, bytes or None) of a protobuf message; enough to read a ModelProto."""
    i = 0

    def varint():
        nonlocal i
        n, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while i < len(buf):
        key = varint()
        wire = key & 7
        if wire == 0:
            varint()
            yield key >> 3, None
        elif wire == 2:
            n = varint()
            yield key >> 3, buf[i:i + n]
            i += n
        else:
            i += 4 if wire == 5 else 8
            yield key >> 3, None


def spm_charsmap():
    """A small precompiled charsmap built by sentencepiece's own builder from custom rules
    (the stock nmt_nfkc one is ~240 kB)."""
    import io
    import tempfile
    import sentencepiece as spm
    rules = ["41\t61", "FF21\t61", "FB01\t66 69", "65 301\tE9", "C5\t41 30A", "2460\t31",
             "3000\t20", "D A\tA", "4E00\t31 32 33", "1F600\t3A 29", "E9\t65"]
    with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
        f.write("\n".join(rules) + "\n")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=model,
                                   vocab_size=400, normalization_rule_tsv=f.name,
                                   minloglevel=2, character_coverage=0.98)
    os.unlink(f.name)
    for field, value in proto_fields(model.getvalue()):
        if field == 3:  # normalizer_spec
            for g, w in proto_fields(value):
                if g == 2:  # precompiled_charsmap
                    return bytes(w)
    raise RuntimeError("no precompiled_charsmap")


def cases():
    meta = pre_tokenizers.Metaspace()

    t = bytelevel_bpe(pre_tokenizers.ByteLevel(add_prefix_space=True))
    t.post_processor = processors.RobertaProcessing(("<|endoftext|>", 0), ("<|endoftext|>", 0))
    yield "bytelevel_prefix_roberta", t

    t = bytelevel_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                         normalizers.Lowercase()])
    t.add_tokens(ADDED)
    yield "bytelevel_noregex_nfd_added", t

    for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next",
                     "contiguous"]:
        for invert in [False, True]:
            pre = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\s+|\d|[,.]"), behavior, invert=invert),
                pre_tokenizers.Split("e", behavior, invert=not invert),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            t = bytelevel_bpe(pre, vocab_size=330)
            yield "split_%s%s" % (behavior, "_invert" if invert else ""), t

    for scheme, split in [("always", True), ("first", True), ("never", False)]:
        t = train_unigram(pre_tokenizers.Metaspace(prepend_scheme=scheme, split=split))
        t.decoder = decoders.Metaspace(prepend_scheme=scheme, split=split)
        t.add_tokens(ADDED)
        t.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
        yield "unigram_metaspace_%s" % scheme, t

    t = train_unigram(meta, byte_fallback=True)
    t.normalizer = normalizers.Sequence([normalizers.NFC(),
                                         normalizers.Replace(Regex(r"\d{3,}"), "#"),
                                         normalizers.Strip(left=True, right=False)])
    t.decoder = decoders.Sequence([decoders.Metaspace(), decoders.ByteFallback(), decoders.Fuse()])
    yield "unigram_bytefallback_replace_strip", t

    t = train_wordpiece(pre_tokenizers.Whitespace(),
                        normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()]))
    t.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    yield "wordpiece_whitespace_lower", t

    t = train_wordpiece(pre_tokenizers.BertPreTokenizer(),
                        normalizers.BertNormalizer(lowercase=False, strip_accents=True,
                                                   handle_chinese_chars=False))
    t.model = models.WordPiece(json.loads(t.to_str())["model"]["vocab"], unk_token="[UNK]",
                               max_input_chars_per_word=12)
    t.add_tokens(ADDED)
    yield "wordpiece_bert_cased_strip", t

    t = train_wordpiece(pre_tokenizers.Sequence([
        pre_tokenizers.CharDelimiterSplit("-"), pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Punctuation("contiguous"), pre_tokenizers.Digits(False)]),
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True))
    t.decoder = decoders.CTC(pad_token="[UNK]", word_delimiter_token="##", cleanup=True)
    yield "wordpiece_delims_ctc", t

    t = train_bpe(pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                           pre_tokenizers.Punctuation("merged_with_previous")]),
                  continuing_subword_prefix="##", end_of_word_suffix="</w>")
    t = with_model(t, continuing_subword_prefix="##", end_of_word_suffix="</w>")
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                         normalizers.Strip()])
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    yield "bpe_prefix_suffix", t

    t = train_bpe(pre_tokenizers.Punctuation("merged_with_next"), vocab_size=200)
    t = with_model(t, fuse_unk=False)
    t.normalizer = normalizers.Prepend("_")
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Punctuation("merged_with_next"),
                                               pre_tokenizers.WhitespaceSplit()])
    t.decoder = decoders.Sequence([decoders.Replace("_", " "), decoders.Strip(" ", 1, 0)])
    yield "bpe_unk_nofuse_prepend", t

    t = train_bpe(meta)
    t = with_model(t, byte_fallback=True, fuse_unk=True, add_bytes=True)
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = None
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    t.post_processor = processors.Sequence([processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)]), processors.ByteLevel()])
    t.add_tokens(ADDED)
    yield "bpe_byte_fallback_llama_added", t

    t = train_unigram(pre_tokenizers.Sequence([pre_tokenizers.UnicodeScripts(), meta]))
    t.normalizer = normalizers.NFKC()
    t.decoder = decoders.Metaspace()
    yield "unigram_unicodescripts_nfkc", t

    t = train_wordpiece(pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                 pre_tokenizers.UnicodeScripts()]),
                        normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()]))
    yield "wordpiece_nfkd_unicodescripts", t

    t = train_unigram(meta)
    t.normalizer = normalizers.Sequence([normalizers.Precompiled(spm_charsmap()),
                                         normalizers.Lowercase()])
    t.decoder = decoders.Metaspace()
    yield "unigram_precompiled", t

    t = Tokenizer(models.WordLevel(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                               pre_tokenizers.FixedLength(length=3)])
    t.train_from_iterator(CORPUS, trainers.WordLevelTrainer(
        vocab_size=300, special_tokens=["<unk>"], show_progress=False))
    yield "wordlevel_fixedlength", t

    t = bytelevel_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=320)
    t = with_model(t, ignore_merges=True)
    t.normalizer = normalizers.NFC()
    t.decoder = decoders.ByteLevel()
    yield "bytelevel_ignore_merges", t


def main():
    os.makedirs(OUT, exist_ok=True)
    names = []
    for name, tok in cases():
        path = os.path.join(OUT, name + ".json")
        tok.save(path, pretty=False)
        tok = Tokenizer.from_file(path)  # exactly what the test loads
        ids = [tok.encode(x, add_special_tokens=True).ids for x in INPUTS]
        exp = {
            "tokenizers": tokenizers.__version__,
            "inputs": INPUTS,
            "ids": ids,
            "decode": [tok.decode(i, skip_special_tokens=False) for i in ids],
            "decode_skip_special": [tok.decode(i, skip_special_tokens=True) for i in ids],
        }
        with open(os.path.join(OUT, name + ".expected.json"), "w", encoding="utf-8") as f:
            json.dump(exp, f, ensure_ascii=False, separators=(",", ":"))
        names.append(name)
    with open(os.path.join(OUT, "MANIFEST"), "w") as f:
        f.write("# made by tests/tokenizer/make_hf_components_golden.py, tokenizers %s\n" %
                tokenizers.__version__)
        f.write("\n".join(names) + "\n")
    print("wrote %d tokenizers to %s" % (len(names), OUT))


if __name__ == "__main__":
    main()
