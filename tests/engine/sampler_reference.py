#!/usr/bin/env python3
"""A Python transcription of llama.cpp's samplers (src/llama-sampler.cpp and the chain of
common/sampling.cpp, llama.cpp as vendored in llama-cpp-python 0.3.36), written from that code
to check ferrox's C++ sampler (src/engine/sampler.cc) against: it writes
tests/engine/sampler_golden.json, the candidates each case keeps and their probabilities, which
tests/engine/sampler_test.cc (SamplerGolden) compares with ferrox's.

    python3 tests/engine/sampler_reference.py   # rewrites the golden file

Arithmetic is float32 where llama.cpp's is float. llama.cpp's min_keep is 0 (llama-server's).
Where llama.cpp leaves a result unspecified, this does what ferrox documents: sorts break
ties by the lower id, typical-p's order is stable and its entropy skips probabilities of 0.
The random parts are fixed by the cases: XTC runs with probability 1 (its chance always
passes), and mirostat's kept set is computed for a given mu (the test sets it and checks the
update after ferrox's own draw).
"""

import json
import math
import os

import numpy as np

F = np.float32
NEG_INF = F(-np.inf)


class Cands:
    """llama_token_data_array: ids, logits, p and the sorted flag."""

    def __init__(self, logits):
        self.d = [[i, F(l), F(0)] for i, l in enumerate(logits)]
        self.sorted = False

    def sort(self):
        self.d.sort(key=lambda t: (-t[1], t[0]))
        self.sorted = True


def softmax(c, do_sort):
    if do_sort and not c.sorted:
        c.sort()
    mx = c.d[0][1]
    if not c.sorted:
        for t in c.d:
            mx = max(mx, t[1])
    cum = F(0)
    for t in c.d:
        t[2] = F(np.exp(F(t[1] - mx)))
        cum = F(cum + t[2])
    for t in c.d:
        t[2] = F(t[2] / cum)


def penalties(c, history, last_n, repeat, freq, present):
    if last_n == 0 or (repeat == 1 and freq == 0 and present == 0):
        return
    window = history if last_n < 0 else history[max(0, len(history) - last_n):]
    counts = {}
    for tok in window:
        counts[tok] = counts.get(tok, 0) + 1
    for t in c.d:
        n = counts.get(t[0], 0)
        if n == 0:
            continue
        if t[1] <= 0:
            t[1] = F(t[1] * F(repeat))
        else:
            t[1] = F(t[1] / F(repeat))
        t[1] = F(t[1] - (F(n) * F(freq) + F(1 if n > 0 else 0) * F(present)))
    c.sorted = False


def dry(c, history, mult, base, allowed, last_n, breakers):
    """llama_sampler_dry_apply. breakers: {head token: [tail token lists]}."""
    if mult == 0 or base < 1 or last_n == 0:
        return
    last_tokens = history if last_n < 0 else history[max(0, len(history) - last_n):]
    n = len(last_tokens)
    if n <= allowed:
        return

    def rat(i):
        return last_tokens[n - 1 - i]

    rep_limit = n
    for i in range(n):
        tails = breakers.get(rat(i))
        if not tails:
            continue
        longest = -1
        for tail in tails:
            seq_len = len(tail)
            if seq_len > longest and seq_len <= i:
                if all(tail[off] == rat(i - off - 1) for off in range(seq_len)):
                    longest = seq_len
        if longest >= 0:
            rep_limit = i - longest
            break
    if rep_limit < allowed:
        return

    # The repeat counts by brute force (llama.cpp's Z-algorithm computes the same): count[last-k]
    # is how far the sequence's suffix matches the tokens ending k back, capped at rep_limit.
    count = [0] * n
    last = n - 1
    for k in range(1, n):
        m = 0
        while m + k < n and rat(m) == rat(m + k):
            m += 1
        count[last - k] = min(m, rep_limit)

    max_repeat = {}
    for i in range(n - 1):
        rl = count[i]
        if rl >= allowed:
            tok = rat(n - 2 - i)
            if tok not in max_repeat or max_repeat[tok] < rl:
                max_repeat[tok] = rl

    max_exponent = 0
    if base > 1.000001:
        max_exponent = int(F(88.7228391) / F(math.log(F(base))))
    for t in c.d:
        if t[0] not in max_repeat:
            continue
        if any(len(tail) == 0 for tail in breakers.get(t[0], [])):
            continue
        e = max_repeat[t[0]] - allowed
        if max_exponent > 0 and e > max_exponent:
            e = max_exponent
        t[1] = F(t[1] - F(F(mult) * F(F(base) ** F(e))))
    c.sorted = False


def top_n_sigma(c, n):
    if n <= 0 or len(c.d) <= 1:
        return
    mx = c.d[0][1]
    s = F(0)
    valid = 0
    for t in c.d:
        if t[1] != NEG_INF:
            mx = max(mx, t[1])
            s = F(s + t[1])
            valid += 1
    mean = F(s / F(valid)) if valid else F(0)
    acc = F(0)
    for t in c.d:
        if t[1] != NEG_INF:
            acc = F(acc + F((float(t[1]) - float(mean)) ** 2))
    sd = F(np.sqrt(F(acc / F(valid)))) if valid else F(0)
    for t in c.d:
        if t[1] < F(mx - F(F(n) * sd)):
            t[1] = NEG_INF


def top_k(c, k):
    if k <= 0:
        return
    k = min(k, len(c.d))
    c.sort()
    del c.d[k:]


def typical(c, p):
    if p >= 1:
        return
    softmax(c, True)
    entropy = F(0)
    for t in c.d:
        if t[2] > 0:
            entropy = F(entropy + F(-t[2] * F(np.log(t[2]))))
    with np.errstate(divide="ignore"):
        scores = [F(abs(F(-F(np.log(t[2])) - entropy))) for t in c.d]
    order = sorted(range(len(c.d)), key=lambda i: scores[i])  # stable
    cum = F(0)
    last = len(order)
    for i, idx in enumerate(order):
        cum = F(cum + c.d[idx][2])
        if cum > F(p):
            last = i + 1
            break
    c.d = [c.d[idx] for idx in order[:last]]
    c.sorted = False


def top_p(c, p):
    if p >= 1:
        return
    softmax(c, False)
    c.sort()
    cum = F(0)
    last = len(c.d)
    for i, t in enumerate(c.d):
        cum = F(cum + t[2])
        if cum >= F(p):
            last = i + 1
            break
    del c.d[last:]


def min_p(c, p):
    if p <= 0 or not c.d:
        return
    mx = max(t[1] for t in c.d)
    min_logit = F(mx + F(np.log(F(p))))
    kept = [t for t in c.d if t[1] >= min_logit]
    if kept:
        c.d = kept


def xtc(c, prob, threshold):
    """With probability 1 (the golden cases): the chance always passes."""
    if prob <= 0 or threshold > 0.5 or len(c.d) < 2:
        return
    assert prob >= 1, "the reference runs XTC only where its chance always passes"
    softmax(c, True)
    pos_last = 0
    for i, t in enumerate(c.d):
        if t[2] >= F(threshold):
            pos_last = i
        else:
            break
    if pos_last > 0:
        del c.d[:pos_last]


def temp_impl(c, temp):
    if not c.d:
        return
    if temp <= 0:
        max_i = 0
        max_l = c.d[0][1]
        for i in range(1, len(c.d)):
            if c.d[i][1] > max_l:
                c.d[max_i][1] = NEG_INF
                max_i = i
                max_l = c.d[i][1]
            else:
                c.d[i][1] = NEG_INF
        return
    for t in c.d:
        t[1] = F(t[1] / F(temp))


def temp_ext(c, temp, delta, exponent):
    if delta > 0:
        min_temp = max(F(0), F(F(temp) - F(delta)))
        max_temp = F(F(temp) + F(delta))
        if len(c.d) <= 1:
            return
        max_entropy = F(-F(np.log(F(F(1) / F(len(c.d))))))
        softmax(c, True)
        entropy = F(0)
        for t in c.d:
            if t[2] > 0:
                entropy = F(entropy - F(t[2] * F(np.log(t[2]))))
        norm = F(entropy / max_entropy)
        dyn = F(min_temp + F(F(max_temp - min_temp) * F(np.power(norm, F(exponent)))))
        temp_impl(c, dyn)
    else:
        temp_impl(c, temp)


def mirostat(c, n_vocab, temp, mu, version):
    temp_impl(c, temp)
    softmax(c, True)
    if version == 1:
        m = 100
        sum_ti_bi = F(0)
        sum_ti_sq = F(0)
        i = 0
        while i < m - 1 and i < len(c.d) - 1:
            t_i = F(np.log(F(F(i + 2) / F(i + 1))))
            b_i = F(np.log(F(c.d[i][2] / c.d[i + 1][2])))
            sum_ti_bi = F(sum_ti_bi + F(t_i * b_i))
            sum_ti_sq = F(sum_ti_sq + F(t_i * t_i))
            i += 1
        s_hat = F(sum_ti_bi / sum_ti_sq)
        eps = F(s_hat - 1)
        k = F(np.power(F(F(eps * F(np.power(F(2), F(mu)))) / F(1 - F(np.power(F(n_vocab), -eps)))),
                       F(1 / s_hat)))
        kk = max(int(k), 1) if -2147483648.0 < k < 2147483648.0 else 1
        top_k(c, kk)
    else:
        keep = 0
        while keep < len(c.d) and not (-F(np.log2(c.d[keep][2])) > F(mu)):
            keep += 1
        del c.d[max(keep, 1):]
    softmax(c, True)


ORDER = {"penalties": penalties, "dry": dry, "top_n_sigma": top_n_sigma, "top_k": top_k, "typ_p": typical,
         "top_p": top_p, "min_p": min_p, "xtc": xtc, "temperature": temp_ext}
CHARS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
         "m": "min_p", "x": "xtc", "t": "temperature"}
DEFAULT_ORDER = ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]


def run_chain(logits, history, p, breakers):
    """common_sampler's chain (logit bias none here) up to the draw: the (id, probability) the
    draw would pick from, probability > 0, most likely first (ties: lower id)."""
    c = Cands(logits)
    if p.get("mirostat", 0):
        mirostat(c, len(logits), p["temperature"], p["mu"], p["mirostat"])
    else:
        order = p.get("samplers", DEFAULT_ORDER)
        if isinstance(order, str):
            order = [CHARS[ch] for ch in order]
        for name in order:
            if name == "penalties":
                penalties(c, history, p.get("penalty_last_n", 64), p.get("repeat_penalty", 1),
                          p.get("frequency_penalty", 0), p.get("presence_penalty", 0))
            elif name == "dry":
                dry(c, history, p.get("dry_multiplier", 0), p.get("dry_base", 1.75), p.get("dry_allowed_length", 2),
                    p.get("dry_penalty_last_n", 64), breakers)
            elif name == "top_n_sigma":
                top_n_sigma(c, p.get("top_n_sigma", -1))
            elif name == "top_k":
                top_k(c, p.get("top_k", 40))
            elif name == "typ_p":
                typical(c, p.get("typical_p", 1))
            elif name == "top_p":
                top_p(c, p.get("top_p", 0.95))
            elif name == "min_p":
                min_p(c, p.get("min_p", 0.05))
            elif name == "xtc":
                xtc(c, p.get("xtc_probability", 0), p.get("xtc_threshold", 0.1))
            elif name == "temperature":
                temp_ext(c, p.get("temperature", 0.8), p.get("dynatemp_range", 0), p.get("dynatemp_exponent", 1))
    # llama_sampler_dist: softmax over what is left
    mx = max(t[1] for t in c.d)
    w = [(t[0], math.exp(float(t[1]) - float(mx)) if t[1] != NEG_INF else 0.0) for t in c.d]
    s = sum(x for _, x in w)
    out = [(i, x / s) for i, x in w if x > 0]
    out.sort(key=lambda e: (-e[1], e[0]))
    return out


def overlapping_token_sequences(pieces, tokenize, s, max_tail_len=20):
    """get_overlapping_token_sequences: head token -> tails."""
    out = {}
    for tok, word in enumerate(pieces):
        if s in word:
            out.setdefault(tok, []).append([])
            continue
        pos = word.find(s[0])
        while pos != -1:
            match = True
            i = 1
            while i < len(s) and i + pos < len(word):
                if word[pos + i] != s[i]:
                    match = False
                    break
                i += 1
            if match:
                tail = tokenize(s[i:])[:max_tail_len]
                if tail not in out.setdefault(tok, []):
                    out[tok].append(tail)
            pos = word.find(s[0], pos + 1)
    return {k: v for k, v in out.items() if v}


# A toy vocabulary for the breakers: its tokenizer maps each character to its one-character
# token (the C++ test does the same).
TOY_PIECES = ["a", "b", "c", "\n", ":", "*", "\"", "ab", "x\n", "c:", "\n\n", "b*", "q", "##", "#", "hello",
              "lo:", "y", "z", "wor"]


def toy_tokenize(text):
    return [TOY_PIECES.index(ch) for ch in text]


def formula_logits(n):
    """l_i = -sqrt(i * 2654435761 mod n): a permutation of -sqrt(0 .. n-1) for a prime n, a
    long-tailed distribution; integer arithmetic and one correctly rounded float32 sqrt, so the
    C++ test computes the same logits."""
    return [float(-F(np.sqrt(F((i * 2654435761) % n)))) for i in range(n)]


def cases():
    rng = np.random.default_rng(31)
    n = 40

    def logits(scale=2.0):
        return [round(float(x), 3) for x in rng.normal(0, scale, n)]

    # A history with repeats of "3 4 5 6", a breaker token (7) inside one of them.
    hist = [1, 2, 3, 4, 5, 6, 9, 3, 4, 5, 6, 10, 11, 3, 4, 7, 5, 12, 3, 4, 5]
    breakers = {7: [[]], 11: [[12]]}
    off = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0}
    out = []
    add = lambda name, p, h=(), b=None, scale=2.0: out.append(
        {"name": name, "params": p, "logits": logits(scale), "history": list(h),
         "breakers": {str(k): v for k, v in (b or {}).items()}})
    add("dry", {**off, "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2,
                "dry_penalty_last_n": -1}, hist, breakers)
    add("dry_window_and_breaker", {**off, "dry_multiplier": 1.5, "dry_base": 2.0, "dry_allowed_length": 1,
                                   "dry_penalty_last_n": 12}, hist + [11, 3, 4], breakers)
    add("xtc", {**off, "xtc_probability": 1.0, "xtc_threshold": 0.05}, scale=3.0)
    add("typical_p", {**off, "typical_p": 0.5})
    add("top_n_sigma", {**off, "top_n_sigma": 1.0})
    add("dynatemp", {**off, "temperature": 0.8, "dynatemp_range": 0.5, "dynatemp_exponent": 1.5})
    add("mirostat_v1", {**off, "mirostat": 1, "temperature": 0.9, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
                        "mu": 5.0})
    add("mirostat_v2", {**off, "mirostat": 2, "temperature": 0.9, "mirostat_tau": 3.0, "mirostat_eta": 0.1,
                        "mu": 6.5})
    add("full_chain", {"repeat_penalty": 1.1, "frequency_penalty": 0.1, "presence_penalty": 0.1,
                       "penalty_last_n": 64, "dry_multiplier": 0.8, "dry_penalty_last_n": -1,
                       "top_n_sigma": 2.5, "top_k": 30, "typical_p": 0.97, "top_p": 0.97, "min_p": 0.01,
                       "xtc_probability": 1.0, "xtc_threshold": 0.15, "temperature": 0.9, "dynatemp_range": 0.3},
        hist, breakers)
    add("order_names", {"samplers": ["temperature", "top_k", "min_p"], "temperature": 1.5, "top_k": 12,
                        "min_p": 0.1, "top_p": 0.5})
    add("order_chars", {"samplers": "xkty", "xtc_probability": 1.0, "xtc_threshold": 0.08, "top_k": 10,
                        "temperature": 0.6, "typical_p": 0.7}, scale=3.0)
    add("greedy_after_xtc", {**off, "xtc_probability": 1.0, "xtc_threshold": 0.05, "temperature": 0.0}, scale=3.0)
    # Larger vocabularies, where ferrox's mirostat and top-k collect from a logit floor instead
    # of sorting everything: logits from a formula both sides compute exactly (integer hash,
    # one correctly rounded float32 division), not stored.
    for name, p in [("mirostat_v1_large", {**off, "mirostat": 1, "temperature": 1.0, "mirostat_tau": 5.0,
                                           "mirostat_eta": 0.1, "mu": 11.0}),
                    ("mirostat_v2_large", {**off, "mirostat": 2, "temperature": 0.9, "mirostat_tau": 5.0,
                                           "mirostat_eta": 0.1, "mu": 9.0}),
                    ("typical_large", {**off, "typical_p": 0.3, "temperature": 1.2}),
                    ("chain_large", {"top_n_sigma": 3.0, "top_k": 50, "typical_p": 0.9, "min_p": 0.01,
                                     "temperature": 0.8, "dynatemp_range": 0.4})]:
        out.append({"name": name, "params": p, "logits_formula": 3001, "history": [], "breakers": {}})
    for c in out:
        if "logits_formula" in c:
            c["logits"] = formula_logits(c["logits_formula"])
        b = {int(k): v for k, v in c["breakers"].items()}
        c["kept"] = [[i, float(f"{p:.7g}")] for i, p in run_chain(c["logits"], c["history"], c["params"], b)]
        if c["name"].startswith("dry"):  # the case must show DRY at work
            plain = run_chain(c["logits"], c["history"], {**c["params"], "dry_multiplier": 0}, b)
            assert max(abs(p - q) for (_, p), (_, q) in zip(sorted(plain), sorted(run_chain(
                c["logits"], c["history"], c["params"], b)))) > 1e-6, c["name"]
    for c in out:
        if "logits_formula" in c:
            del c["logits"]
    toy = {"pieces": TOY_PIECES, "breakers": ["\n", ":", "ab*", "lo:q"]}
    heads = {}
    for s in toy["breakers"]:
        for k, tails in overlapping_token_sequences(TOY_PIECES, toy_tokenize, s).items():
            for t in tails:
                if t not in heads.setdefault(k, []):
                    heads[k].append(t)
    toy["heads"] = {str(k): sorted(v) for k, v in sorted(heads.items())}
    return {"cases": out, "breakers_toy": toy}


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampler_golden.json")
    with open(path, "w") as f:
        json.dump(cases(), f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(path, os.path.getsize(path), "bytes")
