"""Batches and evaluation (issue 46, point 4): a list of prompts on /v1/completions and llama.cpp's
/completion is one batch with a choice per prompt (the same answers as each prompt alone), and
echo with logprobs (max_tokens 0 included) and vLLM's prompt_logprobs give the prompt tokens'
logprobs, checked against llama.cpp's own logits for the same tokens (llama-cpp-python,
logits_all). The official openai SDK where the route is OpenAI's; httpx for llama.cpp's."""
import json
import math

import httpx
import pytest
from openai import OpenAI

from conftest import MODEL

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time"]


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.base + "/v1", api_key="none")


@pytest.fixture(scope="module")
def llama():
    """llama.cpp on the same file, with every position's logits."""
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=MODEL, logits_all=True, n_ctx=512, verbose=False)


def ids(server, text):
    r = httpx.post(server.base + "/tokenize", json={"content": text})
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def alone(client, prompt, max_tokens=8):
    r = client.completions.create(model="m", prompt=prompt, max_tokens=max_tokens, temperature=0)
    assert len(r.choices) == 1
    return r


def llama_logprobs(llama, tokens):
    """log p(tokens[i] | tokens[:i]) for i >= 1, from llama.cpp's logits."""
    llama.reset()
    llama.eval(tokens)
    out = [None]
    for i in range(1, len(tokens)):
        row = llama.scores[i - 1]
        m = float(max(row))
        lz = m + math.log(sum(math.exp(float(x) - m) for x in row))
        out.append(float(row[tokens[i]]) - lz)
    return out


# ---- a list of prompts --------------------------------------------------------------------

def test_list_of_prompts_is_one_choice_per_prompt_as_alone(server, client):
    token_prompt = ids(server, "Water boils at")
    batch = PROMPTS + [token_prompt]
    solo = [alone(client, p) for p in batch]
    r = client.completions.create(model="m", prompt=batch, max_tokens=8, temperature=0)
    assert [c.index for c in r.choices] == list(range(len(batch)))
    for c, s in zip(r.choices, solo):
        assert c.text == s.choices[0].text
        assert c.finish_reason == s.choices[0].finish_reason
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in solo)
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in solo)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_n_choices_per_prompt_are_prompt_major(server, client):
    solo = [alone(client, p, 6).choices[0].text for p in PROMPTS[:2]]
    r = client.completions.create(model="m", prompt=PROMPTS[:2], max_tokens=6, temperature=0, n=3)
    assert [c.index for c in r.choices] == list(range(6))
    for c in r.choices:
        assert c.text == solo[c.index // 3]  # greedy: every choice of a prompt is its answer


def test_mixed_strings_and_token_lists(server, client):
    toks = ids(server, PROMPTS[1])
    r = client.completions.create(model="m", prompt=[PROMPTS[0], toks], max_tokens=6, temperature=0)
    assert [c.text for c in r.choices] == [alone(client, PROMPTS[0], 6).choices[0].text,
                                           alone(client, PROMPTS[1], 6).choices[0].text]


def test_streamed_list_carries_each_choice_index(server, client):
    whole = client.completions.create(model="m", prompt=PROMPTS, max_tokens=8, temperature=0)
    texts, finish = {}, {}
    stream = client.completions.create(model="m", prompt=PROMPTS, max_tokens=8, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    usage = None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finish[c.index] = c.finish_reason
    assert texts == {c.index: c.text for c in whole.choices}
    assert finish == {c.index: c.finish_reason for c in whole.choices}
    assert usage.prompt_tokens == whole.usage.prompt_tokens


# ---- echo and prompt logprobs -------------------------------------------------------------

def test_echo_logprobs_max_tokens_0_match_llama_cpp(server, client, llama):
    text = "Question: What is the capital of France?\nAnswer: Paris"
    toks = ids(server, text)
    assert toks == llama.tokenize(text.encode(), add_bos=False, special=True)
    r = client.completions.create(model="m", prompt=text, max_tokens=0, echo=True, logprobs=1, temperature=0)
    c = r.choices[0]
    assert c.text == text
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == len(toks)
    lp = c.logprobs
    assert len(lp.tokens) == len(toks) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert "".join(lp.tokens) == text
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None  # as OpenAI and vLLM
    ref = llama_logprobs(llama, toks)
    diffs = [abs(a - b) for a, b in zip(lp.token_logprobs[1:], ref[1:])]
    # ferrox's default kernels sum in block order, not ggml's: on this model's massive
    # activations the logits differ from llama.cpp's by up to 1.5 (tests/model/smollm2_golden_test,
    # block order); measured here: at most 0.21 nats, 0.05 on average. A wrong row or offset is
    # off by nats. (Against ferrox's own cold prefill the rows agree to 2e-3:
    # tests/engine/prompt_logprobs_test.cc.)
    assert max(diffs) < 0.35 and sum(diffs) / len(diffs) < 0.1, diffs
    for i in range(1, len(toks)):
        assert len(lp.top_logprobs[i]) == 1
        assert max(lp.top_logprobs[i].values()) >= lp.token_logprobs[i] - 1e-5
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(toks))]


def test_lm_eval_shape_batch_of_token_lists(server, client):
    """What lm-evaluation-harness's local-completions sends for loglikelihood: token ids, echo,
    logprobs 1, max_tokens 1, a batch of requests in one prompt list."""
    ctx = ids(server, "Question: 2 + 2 =\nAnswer:")
    conts = [ids(server, " 4"), ids(server, " 5"), ids(server, " fish")]
    batch = [ctx + c for c in conts]
    r = client.completions.create(model="m", prompt=batch, max_tokens=1, echo=True, logprobs=1, temperature=0,
                                  seed=1234)
    assert len(r.choices) == 3
    scores = []
    for c, p in zip(sorted(r.choices, key=lambda c: c.index), batch):
        lps = c.logprobs.token_logprobs
        assert len(lps) == len(p) + 1  # the prompt, then the one generated token
        scores.append(sum(lps[len(ctx):-1]))
        single = client.completions.create(model="m", prompt=p, max_tokens=0, echo=True, logprobs=1)
        for a, b in zip(single.choices[0].logprobs.token_logprobs[1:], lps[1:len(p)]):
            assert abs(a - b) < 1e-3
    assert scores[0] > scores[2]  # " 4" beats " fish"


def test_echo_without_logprobs_prefixes_the_prompt(server, client):
    gen = alone(client, PROMPTS[0], 5).choices[0].text
    r = client.completions.create(model="m", prompt=PROMPTS[0], max_tokens=5, echo=True, temperature=0)
    assert r.choices[0].text == PROMPTS[0] + gen
    assert r.choices[0].logprobs is None


def test_echo_logprobs_then_completion(server, client):
    toks = ids(server, PROMPTS[2])
    r = client.completions.create(model="m", prompt=PROMPTS[2], max_tokens=4, echo=True, logprobs=2, temperature=0)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(toks) + 4
    assert r.choices[0].text.startswith(PROMPTS[2])
    assert lp.text_offset[len(toks)] == len(PROMPTS[2])  # the completion's first token
    assert all(len(t) == 2 for t in lp.top_logprobs[1:])


def test_streamed_echo_sends_the_prompt_first(server, client):
    whole = client.completions.create(model="m", prompt=PROMPTS[:2], max_tokens=4, echo=True, logprobs=1,
                                      temperature=0)
    first, texts, lps = {}, {}, {}
    for chunk in client.completions.create(model="m", prompt=PROMPTS[:2], max_tokens=4, echo=True, logprobs=1,
                                           temperature=0, stream=True):
        for c in chunk.choices:
            first.setdefault(c.index, c.text)
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.logprobs:
                lps.setdefault(c.index, []).extend(c.logprobs.token_logprobs)
    for c in whole.choices:
        assert first[c.index] == PROMPTS[c.index]
        assert texts[c.index] == c.text
        assert lps[c.index][0] is None
        assert len(lps[c.index]) == len(c.logprobs.token_logprobs)
        for a, b in zip(lps[c.index][1:], c.logprobs.token_logprobs[1:]):
            assert abs(a - b) < 1e-3


def test_vllm_prompt_logprobs_field(server, llama):
    text = "Hot is the opposite of cold"
    toks = ids(server, text)
    r = httpx.post(server.base + "/v1/completions",
                   json={"model": "m", "prompt": text, "max_tokens": 2, "temperature": 0, "prompt_logprobs": 3})
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    plp = c["prompt_logprobs"]
    assert len(plp) == len(toks) and plp[0] is None
    ref = llama_logprobs(llama, toks)
    for i in range(1, len(toks)):
        entry = plp[i]
        mine = entry[str(toks[i])]
        assert abs(mine["logprob"] - ref[i]) < 0.35  # (as above: block order against ggml's)
        assert mine["rank"] >= 1
        assert 3 <= len(entry) <= 4  # the token and the best three (it may be one of them)
        ranked = sorted((v for k, v in entry.items() if k != str(toks[i]) or v["rank"] <= 3), key=lambda v: v["rank"])
        assert [v["rank"] for v in ranked][:3] == [1, 2, 3]
    assert c["logprobs"] is None  # prompt_logprobs alone asks nothing of the completion


def test_prompt_logprobs_skip_a_warm_prefix_cache(server, client):
    text = "A long shared beginning that the prefix cache will hold after the first request. " * 4
    client.completions.create(model="m", prompt=text, max_tokens=1, temperature=0)
    r = client.completions.create(model="m", prompt=text, max_tokens=0, echo=True, logprobs=0)
    lps = r.choices[0].logprobs.token_logprobs
    assert lps[0] is None and all(isinstance(x, float) for x in lps[1:])
    assert r.usage.prompt_tokens_details.cached_tokens == 0


# ---- llama.cpp's /completion --------------------------------------------------------------

def completion(server, body):
    return httpx.post(server.base + "/completion", json=body, timeout=60)


def test_llamacpp_list_is_an_array_of_results(server):
    toks = ids(server, PROMPTS[1])
    solo = [completion(server, {"prompt": p, "n_predict": 6, "temperature": 0}).json() for p in [PROMPTS[0], toks]]
    r = completion(server, {"prompt": [PROMPTS[0], toks], "n_predict": 6, "temperature": 0})
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, list) and len(out) == 2
    for i, (o, s) in enumerate(zip(out, solo)):
        assert o["index"] == i
        assert o["content"] == s["content"]
        assert o["tokens_evaluated"] == s["tokens_evaluated"]
        assert o["tokens_predicted"] == s["tokens_predicted"] == 6
        assert o["stop"] is True
    # A mix of ids and text in one array stays one prompt (llama.cpp's rule).
    one = completion(server, {"prompt": toks[:2] + [PROMPTS[0]], "n_predict": 2, "temperature": 0}).json()
    assert isinstance(one, dict)


def test_llamacpp_streamed_list(server):
    whole = completion(server, {"prompt": PROMPTS, "n_predict": 5, "temperature": 0}).json()
    content, stops = {}, set()
    with httpx.stream("POST", server.base + "/completion",
                      json={"prompt": PROMPTS, "n_predict": 5, "temperature": 0, "stream": True}, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            c = json.loads(line[6:])
            content[c["index"]] = content.get(c["index"], "") + c["content"]
            if c["stop"]:
                stops.add(c["index"])
    assert stops == {0, 1, 2}
    assert content == {o["index"]: o["content"] for o in whole}


# ---- hostile inputs -----------------------------------------------------------------------

@pytest.mark.parametrize("body,field", [
    ({"prompt": []}, "prompt"),
    ({"prompt": [[]]}, "prompt[0]"),
    ({"prompt": [[[1, 2]]]}, "prompt[0]"),
    ({"prompt": ["ok", [[1]]]}, "prompt[1]"),
    ({"prompt": ["x"] * 129}, "prompt"),
    ({"prompt": ["x"] * 40, "n": 4}, "n"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [{"text": "a"}]}, "prompt[0]"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [[1, 99999999]]}, "prompt[0]"),
    ({"prompt": ["ok", ""]}, "prompt[1]"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": -1, "echo": True}, "max_tokens"),
    ({"prompt": "x", "echo": "yes"}, "echo"),
    ({"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt": "x", "prompt_logprobs": "3"}, "prompt_logprobs"),
    ({"prompt": "x", "echo": True, "logprobs": 6}, "logprobs"),
])
def test_completions_hostile(server, body, field):
    r = httpx.post(server.base + "/v1/completions", json={"model": "m", **body})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field, r.text


@pytest.mark.parametrize("body", [
    {"prompt": []},
    {"prompt": [[]]},
    {"prompt": [[[1]]]},
    {"prompt": ["a", {"b": 1}]},
    {"prompt": ["x"] * 129},
    {"prompt": ["ok", [1, -5]]},
    {"prompt": ["ok", ""]},
    {"prompt": 3.5},
])
def test_llamacpp_hostile(server, body):
    r = completion(server, {"n_predict": 2, **body})
    assert r.status_code == 400, r.text


def test_sdk_raises_on_a_bad_list(client):
    import openai
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt=[], max_tokens=1)
