#!/usr/bin/env python3
"""Writes mc_basic.jsonl: 100 simple multiple-choice questions (40 sums and differences, 30
capitals, 30 opposites), four choices each, for bench/bench_eval.py. Deterministic (seed 46);
the questions are written here, not downloaded (the hub is unreachable from the bench)."""
import json
import os
import random

rng = random.Random(46)
rows = []

for i in range(40):
    a, b = rng.randint(2, 49), rng.randint(2, 49)
    op = "plus" if i % 2 == 0 else "minus"
    if op == "minus" and b > a:
        a, b = b, a
    ans = a + b if op == "plus" else a - b
    wrong = set()
    while len(wrong) < 3:
        w = ans + rng.choice([-10, -2, -1, 1, 2, 10, 3, -3])
        if w != ans and w >= 0:
            wrong.add(w)
    rows.append((f"What is {a} {op} {b}?", str(ans), [str(w) for w in sorted(wrong)]))

CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("Egypt", "Cairo"),
            ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"), ("India", "New Delhi"),
            ("Mexico", "Mexico City"), ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Norway", "Oslo"),
            ("Sweden", "Stockholm"), ("Finland", "Helsinki"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
            ("Ireland", "Dublin"), ("Kenya", "Nairobi"), ("Argentina", "Buenos Aires"), ("Peru", "Lima"),
            ("Thailand", "Bangkok"), ("Turkey", "Ankara"), ("Denmark", "Copenhagen"), ("Hungary", "Budapest"),
            ("the United Kingdom", "London"), ("South Korea", "Seoul")]
cities = [c for _, c in CAPITALS]
for country, city in CAPITALS:
    wrong = rng.sample([c for c in cities if c != city], 3)
    rows.append((f"What is the capital of {country}?", city, wrong))

OPPOSITES = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("up", "down"), ("day", "night"),
             ("happy", "sad"), ("open", "closed"), ("light", "dark"), ("old", "young"), ("full", "empty"),
             ("early", "late"), ("hard", "soft"), ("high", "low"), ("rich", "poor"), ("wet", "dry"),
             ("strong", "weak"), ("long", "short"), ("loud", "quiet"), ("thick", "thin"), ("win", "lose"),
             ("push", "pull"), ("left", "right"), ("inside", "outside"), ("begin", "end"), ("buy", "sell"),
             ("true", "false"), ("clean", "dirty"), ("heavy", "light"), ("first", "last"), ("love", "hate")]
words = sorted({w for pair in OPPOSITES for w in pair})
for word, opp in OPPOSITES:
    wrong = rng.sample([w for w in words if w not in (word, opp)], 3)
    rows.append((f"What is the opposite of \"{word}\"?", opp, wrong))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mc_basic.jsonl")
with open(out, "w") as f:
    for q, right, wrong in rows:
        choices = wrong + [right]
        rng.shuffle(choices)
        f.write(json.dumps({"question": q, "choices": choices, "answer": choices.index(right)}) + "\n")
print(f"{len(rows)} questions -> {out}")
