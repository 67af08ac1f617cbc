"""Embeddings end to end: all-MiniLM-L6-v2 served beside the chat model, driven by the official
openai SDK (base64 by default, and float), llama.cpp's /embedding, and the 400s that keep each
kind of model on its own routes. Vectors are checked against the golden reference of
scripts/golden/minilm_reference.py (an independent numpy BERT on the same weights)."""
import base64
import concurrent.futures
import json
import os
import subprocess
import sys
import time

import httpx
import numpy as np
import openai
import pytest

from conftest import MODEL, ROOT, Server

EMBED = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
GOLDEN = os.path.join(ROOT, "tests", "model", "golden", "minilm_embeddings.json")
ADMIN = {"Authorization": "Bearer admin-secret"}
NAME = "all-MiniLM-L6-v2"
CHAT = os.path.basename(MODEL)[: -len(".gguf")]


def golden():
    with open(GOLDEN) as f:
        cases = json.load(f)["cases"]
    for c in cases:
        c["vec"] = np.frombuffer(base64.b64decode(c["vec_f16"]), dtype="<f2").astype(np.float64)
    return cases


CASES = golden()


def cos(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def emb():
    if not os.path.exists(MODEL) or not os.path.exists(os.path.join(EMBED, "model.safetensors")):
        pytest.skip("run `make model` first")
    s = Server("-m", EMBED, "--admin-key", "admin-secret")
    # /health is 200 once the first model is ready; the second loads after it.
    deadline = time.time() + 60
    while NAME not in httpx.get(s.base + "/v1/models").text:
        assert time.time() < deadline, "the embedding model did not load"
        time.sleep(0.1)
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def client(emb):
    return openai.OpenAI(base_url=emb.base + "/v1", api_key="none")


def test_models_lists_both_kinds(emb):
    r = httpx.get(emb.base + "/v1/models").json()
    kinds = {m["id"]: m["meta"]["kind"] for m in r["data"]}
    assert kinds[NAME] == "embed" and kinds[CHAT] == "generate"
    meta = next(m["meta"] for m in r["data"] if m["id"] == NAME)
    assert (meta["n_embd"], meta["n_ctx"], meta["pooling"], meta["normalize"]) == (384, 256, "mean", True)


def test_sdk_default_base64_matches_the_reference(client):
    texts = [c["text"] for c in CASES if c["n_tokens_used"] == len(c["ids"])]
    r = client.embeddings.create(model=NAME, input=texts)  # the SDK asks for base64 and decodes it
    assert [d.index for d in r.data] == list(range(len(texts)))
    by_text = {c["text"]: c for c in CASES}
    worst = min(cos(d.embedding, by_text[t]["vec"]) for d, t in zip(r.data, texts))
    assert worst > 0.9999, worst
    assert all(abs(np.linalg.norm(d.embedding) - 1) < 1e-5 for d in r.data)
    assert r.usage.prompt_tokens == sum(len(by_text[t]["ids"]) for t in texts) == r.usage.total_tokens
    assert r.model == NAME


def test_float_and_base64_agree(emb, client):
    f = client.embeddings.create(model=NAME, input="Hello, world!", encoding_format="float")
    raw = httpx.post(emb.base + "/v1/embeddings", json={"model": NAME, "input": "Hello, world!",
                                                       "encoding_format": "base64"}).json()
    b = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    assert len(f.data[0].embedding) == 384
    assert np.array_equal(np.array(f.data[0].embedding, dtype=np.float32), b)
    assert cos(b, CASES[1]["vec"]) > 0.9999


def test_token_id_inputs(client):
    c = CASES[4]
    one = client.embeddings.create(model=NAME, input=c["ids"], encoding_format="float")
    many = client.embeddings.create(model=NAME, input=[c["ids"], CASES[5]["ids"]], encoding_format="float")
    assert cos(one.data[0].embedding, c["vec"]) > 0.9999
    assert cos(many.data[1].embedding, CASES[5]["vec"]) > 0.9999
    assert one.usage.prompt_tokens == len(c["ids"])


def test_default_model_is_the_embedding_model(emb):
    r = httpx.post(emb.base + "/v1/embeddings", json={"input": "x"})
    assert r.status_code == 200 and r.json()["model"] == NAME


def test_unknown_names_go_to_the_one_model_of_each_kind(emb):
    # One chat model and one embedding model (llama-server's rule): each route's kind serves a
    # name that no model has, and the answer names the model that served it.
    r = httpx.post(emb.base + "/v1/embeddings", json={"input": "x", "model": "text-embedding-3-small"})
    assert r.status_code == 200 and r.json()["model"] == NAME
    r = httpx.post(emb.base + "/v1/completions", timeout=60, json={"model": "gpt-4o", "prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == CHAT


def test_too_long_is_a_400_with_the_numbers_unless_truncated(client):
    long = next(c for c in CASES if len(c["ids"]) > 256)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=NAME, input=long["text"])
    msg = str(e.value)
    assert "256" in msg and str(len(long["ids"])) in msg and "truncate_prompt_tokens" in msg
    r = client.embeddings.create(model=NAME, input=long["text"], encoding_format="float",
                                 extra_body={"truncate_prompt_tokens": -1})
    assert r.usage.prompt_tokens == 256
    assert cos(r.data[0].embedding, long["vec"]) > 0.9999  # cut as sentence-transformers cuts


def test_dimensions(client):
    r = client.embeddings.create(model=NAME, input="x", dimensions=384, encoding_format="float")
    assert len(r.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=NAME, input="x", dimensions=128)
    assert "Matryoshka" in str(e.value)


@pytest.mark.parametrize("body,param", [
    ({"input": []}, "input"),
    ({"input": 5}, "input"),
    ({"input": [[]]}, "input[0]"),
    ({"input": [1, 99999999]}, "input"),
    ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "x", "truncate_prompt_tokens": "a"}, "truncate_prompt_tokens"),
])
def test_bad_requests(emb, body, param):
    r = httpx.post(emb.base + "/v1/embeddings", json=body)
    assert r.status_code in (400, 404), r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"]


def test_llamacpp_embedding_route(emb):
    r = httpx.post(emb.base + "/embedding", json={"content": CASES[7]["text"]})
    assert r.status_code == 200
    out = r.json()
    assert isinstance(out, list) and out[0]["index"] == 0 and len(out[0]["embedding"]) == 1
    assert cos(out[0]["embedding"][0], CASES[7]["vec"]) > 0.9999
    r = httpx.post(emb.base + "/embedding", json={"content": ["a", "b"], "model": CHAT})
    assert r.status_code == 400 and "not an embedding model" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == 400  # llama.cpp's error shape


def test_embedding_model_is_refused_on_generating_routes(emb, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert "is an embedding model" in str(e.value)
    routes = [
        ("/v1/completions", {"model": NAME, "prompt": "hi", "max_tokens": 2}, "error"),
        ("/v1/responses", {"model": NAME, "input": "hi", "max_output_tokens": 16}, "error"),
        ("/v1/messages", {"model": NAME, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}, "error"),
        ("/completion", {"model": NAME, "prompt": "hi", "n_predict": 2}, "error"),
    ]
    for path, body, key in routes:
        r = httpx.post(emb.base + path, json=body, timeout=30)
        assert r.status_code == 400, (path, r.text)
        assert "is an embedding model" in r.json()[key]["message"], (path, r.text)
    # ...while the chat model still answers, and is the default of a generating route.
    r = httpx.post(emb.base + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200 and r.json()["model"] == CHAT


def test_decoder_on_embeddings_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=CHAT, input="hi")
    assert "not an embedding model" in str(e.value)


def test_concurrent_requests_batch_and_stay_exact(emb):
    texts = [c["text"] for c in CASES[:24] if c["n_tokens_used"] == len(c["ids"])]

    def one(t):
        r = httpx.post(emb.base + "/v1/embeddings", json={"model": NAME, "input": t}, timeout=60)
        return t, r.json()["data"][0]["embedding"]

    by_text = {c["text"]: c for c in CASES}
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        for t, v in ex.map(one, texts):
            assert cos(v, by_text[t]["vec"]) > 0.9999, t


def test_gguf_conversion_loads_and_swaps(emb, tmp_path):
    """llama.cpp's conversion, F32 then F16 (hot-swapped under one alias): the same vectors, and
    the F16 file's matrices kept in F16 (half the weight bytes of the F32 one)."""
    pytest.importorskip("gguf")
    weight_bytes = {}
    for outtype in ("f32", "f16"):
        out = tmp_path / f"minilm-{outtype}.gguf"
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "golden", "minilm_to_gguf.py"), EMBED, str(out),
                        "--outtype", outtype], check=True, capture_output=True)
        for replace in (False, True) if outtype == "f32" else (True,):  # load, then hot-swap the alias
            r = httpx.post(emb.base + "/admin/models/load", headers=ADMIN, timeout=120,
                           json={"path": str(out), "alias": "minilm-gguf", "replace": replace})
            assert r.status_code == 200, r.text
            texts = [CASES[i]["text"] for i in (1, 12, 25, 33)]
            r = httpx.post(emb.base + "/v1/embeddings", json={"model": "minilm-gguf", "input": texts}, timeout=60)
            assert r.status_code == 200, r.text
            for d, i in zip(r.json()["data"], (1, 12, 25, 33)):
                assert cos(d["embedding"], CASES[i]["vec"]) > 0.9999, (outtype, i)
        listed = httpx.get(emb.base + "/admin/models", headers=ADMIN).json()
        entry = [m for m in listed["data"] if m["id"] == "minilm-gguf" and m["state"] != "draining"]
        assert len(entry) == 1, listed
        weight_bytes[outtype] = entry[0]["weight_bytes"]
    # The encoder matrices (~42 MB in F32) halve; embeddings tables stay F32 in memory.
    assert weight_bytes["f16"] < weight_bytes["f32"] - 15_000_000, weight_bytes
    models = httpx.get(emb.base + "/admin/models", headers=ADMIN).json()
    assert "minilm-gguf" in json.dumps(models)
    r = httpx.post(emb.base + "/admin/models/unload", headers=ADMIN, json={"alias": "minilm-gguf"})
    assert r.status_code == 200


def write_safetensors_as(src, dst, dtype):
    """src's tensors rewritten as F16 or BF16 (rounded to nearest even) into dst, a safetensors
    file written from the format's specification: an 8-byte little-endian header length, the
    JSON header, the data."""
    with open(src, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, offset = {}, [], 0
    for name, t in header.items():
        if name == "__metadata__":
            out_header[name] = t
            continue
        b, e = t["data_offsets"]
        if t["dtype"] != "F32":  # e.g. the I64 position_ids buffer: kept as it is
            out_header[name] = {**t, "data_offsets": [offset, offset + e - b]}
            chunks.append(data[b:e])
            offset += e - b
            continue
        x = np.frombuffer(data[b:e], dtype="<f4")
        if dtype == "F16":
            raw = x.astype("<f2").tobytes()
        else:  # BF16: the high half of the float32 bits, rounded to nearest even
            u = x.view("<u4").astype(np.uint64)
            raw = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        out_header[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hb = json.dumps(out_header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(dst, "wb") as f:
        f.write(len(hb).to_bytes(8, "little") + hb + b"".join(chunks))


@pytest.mark.parametrize("dtype,min_cos", [("F16", 0.9999), ("BF16", 0.999)])
def test_half_precision_safetensors_keep_their_precision(emb, tmp_path, dtype, min_cos):
    """A sentence-transformers directory whose weights are F16 or BF16: its matrices are packed
    in that type (half the F32 directory's weight bytes), and the vectors still match the
    golden F32 reference to the type's precision."""
    d = tmp_path / f"minilm-{dtype.lower()}"
    d.mkdir()
    for name in os.listdir(EMBED):
        src = os.path.join(EMBED, name)
        if name == "model.safetensors":
            write_safetensors_as(src, d / name, dtype)
        else:
            os.symlink(src, d / name)
    alias = f"minilm-{dtype.lower()}"
    r = httpx.post(emb.base + "/admin/models/load", headers=ADMIN, timeout=120, json={"path": str(d), "alias": alias})
    assert r.status_code == 200, r.text
    try:
        idx = list(range(0, len(CASES), 3))
        r = httpx.post(emb.base + "/v1/embeddings", json={"model": alias, "input": [CASES[i]["text"] for i in idx],
                                                        "truncate_prompt_tokens": -1},
                       timeout=60)
        assert r.status_code == 200, r.text
        worst = min(cos(v["embedding"], CASES[i]["vec"]) for v, i in zip(r.json()["data"], idx))
        assert worst > min_cos, worst
        listed = {m["id"]: m for m in httpx.get(emb.base + "/admin/models", headers=ADMIN).json()["data"]}
        assert listed[alias]["weight_bytes"] < listed[NAME]["weight_bytes"] - 15_000_000, listed
    finally:
        httpx.post(emb.base + "/admin/models/unload", headers=ADMIN, json={"alias": alias})
