"""Per-file pass/fail/skip counts of a pytest JUnit report (bench/llamacpp_suite/run.sh)."""
import collections
import sys
import xml.etree.ElementTree as ET

counts = collections.defaultdict(collections.Counter)
for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = case.get("classname", "").split(".")[-1] + ".py"
    kinds = {child.tag for child in case}
    if "skipped" in kinds:
        outcome = "skipped"
    elif kinds & {"failure", "error"}:
        outcome = "failed"
    else:
        outcome = "passed"
    counts[name][outcome] += 1

total = collections.Counter()
print(f"{'file':34} {'passed':>6} {'failed':>6} {'skipped':>7}")
for name in sorted(counts):
    c = counts[name]
    total.update(c)
    print(f"{name:34} {c['passed']:6} {c['failed']:6} {c['skipped']:7}")
print(f"{'total':34} {total['passed']:6} {total['failed']:6} {total['skipped']:7}"
      f"  (runnable: {total['passed'] + total['failed']})")
