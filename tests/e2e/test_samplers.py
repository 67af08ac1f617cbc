"""llama.cpp's further samplers on every generating route: DRY, XTC, typical-p, top-n-sigma,
dynamic temperature, mirostat v1/v2 and the `samplers` order, under llama-server's names
(/completion, and the same names as extra body fields of the OpenAI routes, as llama-server's
OpenAI routes take them). Each field accepted, hostile values refused with a 400 in the route's
shape, each sampler seen at work in the output, and a seed giving the same text twice. The
numbers themselves are checked against a transcription of llama.cpp in
tests/engine/sampler_golden_test.cc."""
import os

import httpx
import pytest

from conftest import MODEL, Server

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="the default model is missing: run `make model`")

PROMPT = "Count: one two three one two three one two three one two three"

FIELDS = {
    "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
    "dry_sequence_breakers": ["\n", ":", "\"", "*"], "xtc_probability": 0.5, "xtc_threshold": 0.1,
    "typical_p": 0.9, "top_n_sigma": 1.5, "dynatemp_range": 0.3, "dynatemp_exponent": 1.2,
    "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
    "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
}

HOSTILE = [
    ("dry_multiplier", "1"), ("dry_multiplier", -1), ("dry_base", [2]), ("dry_allowed_length", -1),
    ("dry_allowed_length", 1.5), ("dry_penalty_last_n", -2), ("dry_sequence_breakers", []),
    ("dry_sequence_breakers", "\n"), ("dry_sequence_breakers", [1]), ("dry_sequence_breakers", ["a"] * 65),
    ("xtc_probability", 1.5), ("xtc_probability", True), ("xtc_threshold", -0.1), ("typical_p", 2),
    ("typical_p", {}), ("top_n_sigma", -5), ("dynatemp_range", -1), ("dynatemp_exponent", "x"),
    ("mirostat", 3), ("mirostat", 1.5), ("mirostat", "2"), ("mirostat_tau", -1), ("mirostat_eta", 11),
    ("samplers", ["top_k", "bogus"]), ("samplers", "kq"), ("samplers", 5), ("samplers", [1, 2]),
    ("samplers", ["infill"]),
]


@pytest.fixture(scope="module")
def srv():
    s = Server()
    yield s
    s.stop()


def completion(s, **kw):
    body = {"prompt": PROMPT, "n_predict": 16, "temperature": 0, "seed": 42, **kw}
    return httpx.post(s.base + "/completion", json=body, timeout=120)


def chat(s, **kw):
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16, "temperature": 0,
            "seed": 42, **kw}
    return httpx.post(s.base + "/v1/chat/completions", json=body, timeout=120)


def legacy(s, **kw):
    body = {"model": "m", "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "seed": 42, **kw}
    return httpx.post(s.base + "/v1/completions", json=body, timeout=120)


def text(r):
    assert r.status_code == 200, r.text
    j = r.json()
    if "content" in j:
        return j["content"]
    c = j["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


@pytest.mark.parametrize("route", [completion, chat, legacy])
def test_every_field_accepted(srv, route):
    text(route(srv, **FIELDS))
    for k, v in FIELDS.items():
        text(route(srv, **{k: v}))
    text(route(srv, samplers="edskypmxt"))
    text(route(srv, samplers=["Top-K", "nucleus", "minp", "temp"]))
    text(route(srv, mirostat=1, temperature=0.8))
    text(route(srv, mirostat=2, temperature=0.8))


@pytest.mark.parametrize("field,value", HOSTILE)
def test_hostile_values_refused_on_completion(srv, field, value):
    r = completion(srv, **{field: value})
    assert r.status_code == 400, (field, value, r.text)
    err = r.json()["error"]
    assert err["code"] == 400 and field in err["message"], err


@pytest.mark.parametrize("field,value", HOSTILE)
def test_hostile_values_refused_on_chat(srv, field, value):
    r = chat(srv, **{field: value})
    assert r.status_code == 400, (field, value, r.text)
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and field in (err.get("param") or err["message"]), err


def test_dry_breaks_a_greedy_loop(srv):
    """Greedy repeats the counting pattern; DRY penalizes every token that would extend a
    repeat, so the same greedy request with it writes something else, on both routes."""
    plain = text(completion(srv, n_predict=24))
    assert plain.split()[:6] == ["one", "two"] * 3  # the loop
    dry = text(completion(srv, n_predict=24, dry_multiplier=3.0, dry_allowed_length=1))
    assert plain != dry and dry.split()[:6] != plain.split()[:6]
    assert text(chat(srv)) != text(chat(srv, dry_multiplier=3.0, dry_allowed_length=1))
    # every word of the loop a sequence breaker: no repeat spans one, so DRY has nothing to
    # penalize and greedy loops again
    breakers = [" one", " two", " three", "one", "two", "three"]
    assert text(completion(srv, n_predict=24, dry_multiplier=3.0, dry_allowed_length=1,
                           dry_sequence_breakers=breakers)) == plain


def test_mirostat_low_target_is_greedy_and_xtc_drops_the_top(srv):
    greedy = text(completion(srv))
    # a target surprise near 0 keeps only the most likely token, whatever the temperature
    assert text(completion(srv, temperature=1.0, mirostat=2, mirostat_tau=0.01, mirostat_eta=0.0)) == greedy
    assert text(completion(srv, temperature=1.0, top_n_sigma=0.001, samplers="st")) == greedy
    # XTC at probability 1 removes every likely token but the least of them: greedy then
    # differs from its first token on
    r = completion(srv, xtc_probability=1.0, xtc_threshold=0.001, n_predict=1)
    g = completion(srv, n_predict=1)
    assert text(r) != text(g)


def test_order_field_changes_which_samplers_run(srv):
    # only the temperature: at 0 greedy, as the default chain at 0
    assert text(completion(srv, samplers=["temperature"])) == text(completion(srv))
    assert text(completion(srv, samplers="t")) == text(completion(srv))
    # without "xtc" in the order the XTC fields do nothing
    assert text(completion(srv, xtc_probability=1.0, xtc_threshold=0.001, samplers="kt", n_predict=1)) == \
        text(completion(srv, n_predict=1))


@pytest.mark.parametrize("route", [completion, chat])
def test_seeded_full_chain_is_deterministic(srv, route):
    kw = dict(FIELDS, temperature=1.0, xtc_probability=0.5, n_predict=24, max_tokens=24)
    if route is completion:
        kw.pop("max_tokens")
    else:
        kw.pop("n_predict")
    a, b = text(route(srv, **kw)), text(route(srv, **kw))
    assert a == b
    for m in (1, 2):
        kw2 = dict(kw, mirostat=m, mirostat_tau=4.0)
        assert text(route(srv, **kw2)) == text(route(srv, **kw2))


def test_server_flags_set_the_defaults():
    """llama-server's command-line defaults: DRY on for every request that sets nothing."""
    s = Server("--dry-multiplier", "3", "--dry-allowed-length", "1", "--samplers", "penalties;dry;top_k;temperature",
               "--mirostat-ent", "4", "--xtc-threshold", "0.2", "--typical", "1", "--top-nsigma", "-1",
               "--dynatemp-range", "0", "--dynatemp-exp", "1", "--mirostat", "0", "--mirostat-lr", "0.1",
               "--xtc-probability", "0", "--dry-base", "1.75", "--dry-penalty-last-n", "64",
               "--dry-sequence-breaker", "none")
    try:
        plain = Server()
        try:
            assert text(completion(s)) != text(completion(plain))
            # a request's own field wins
            assert text(completion(s, dry_multiplier=0)) == text(completion(plain))
        finally:
            plain.stop()
    finally:
        s.stop()


@pytest.mark.parametrize("flags", [["--mirostat", "3"], ["--samplers", "top_k;bogus"], ["--sampler-seq", "kq"],
                                   ["--xtc-probability", "2"], ["--dry-penalty-last-n", "-5"]])
def test_bad_server_flags_refused(flags):
    with pytest.raises(RuntimeError):
        Server(*flags)


def test_generation_settings_echo_the_samplers(srv):
    """/completion's generation_settings carries the sampler fields as llama-server's does."""
    r = completion(srv, dry_multiplier=0.5, dry_sequence_breakers=["x"], xtc_threshold=0.25, mirostat=2,
                   mirostat_tau=4.5, samplers="kt", typical_p=0.75)
    g = r.json()["generation_settings"]
    assert g["dry_multiplier"] == 0.5 and g["dry_sequence_breakers"] == ["x"] and g["xtc_threshold"] == 0.25
    assert g["mirostat"] == 2 and g["mirostat_tau"] == 4.5 and g["typical_p"] == 0.75
    assert g["samplers"] == ["top_k", "temperature"]
    assert completion(srv).json()["generation_settings"]["samplers"] == [
        "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]
