#!/usr/bin/env python3
"""Takes the README's screenshots of the web page (docs/webui-chat.png, docs/webui-dashboard.png,
docs/webui-phone.png) with headless Chromium, against the real binary.

The chat is answered by a scripted stand-in (--test-script) so the picture shows every kind of
content (reasoning, Markdown, code, math) whatever the small default model would say; the
dashboard watches the real default model under a few concurrent streams.

    python3 scripts/webui_screenshots.py [--bin build/bin/ferrox]
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

REPLY = (
    "<think>The user wants quicksort in Python and its cost. Partition around a pivot, recurse on "
    "both sides; average O(n log n), worst case O(n^2).</think>"
    "Quicksort picks a **pivot**, splits the list around it and sorts both sides:\n\n"
    "```python\ndef quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    pivot, *rest = xs\n"
    "    left = [x for x in rest if x < pivot]\n    right = [x for x in rest if x >= pivot]\n"
    "    return quicksort(left) + [pivot] + quicksort(right)\n```\n\n"
    "| case | comparisons |\n|---|---|\n| average | $\\approx 1.39\\, n \\log_2 n$ |\n| worst | $\\frac{n(n-1)}{2}$ |\n\n"
    "The average follows from $$C(n) = n - 1 + \\frac{2}{n} \\sum_{k=0}^{n-1} C(k).$$\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "ferrox"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs"))
    args = ap.parse_args()
    os.environ["FERROX_BIN"] = args.bin
    import conftest
    conftest.BIN = args.bin
    from conftest import MODEL, Server
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    import test_webui as t

    tmp = tempfile.mkdtemp()
    script = os.path.join(tmp, "script.json")
    with open(script, "w") as f:
        json.dump([{"when": "", "reply": REPLY}], f)
    opts = webdriver.ChromeOptions()
    browser, drv = t.chromium_paths()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--hide-scrollbars",
              "--window-size=1280,1000", f"--user-data-dir={tmp}/chromium", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(executable_path=drv), options=opts)
    try:
        chat = Server("-m", MODEL, "--alias", "SmolLM2-135M-Instruct", "--test-script", script)
        try:
            t.open_page(d, chat.base + "/")
            d.execute_script("localStorage.clear(); localStorage.setItem('ferrox.theme', 'light')")
            for i, title in enumerate(("Rust lifetimes, explained", "A weekend in Lyon", "SQL window functions")):
                d.execute_script("""localStorage.setItem('ferrox.conv.' + arguments[0], JSON.stringify({id: arguments[0],
                    title: arguments[1], created: 1, updated: Date.now() - arguments[2], model: '',
                    messages: [{role: 'user', content: arguments[1]}]}))""", "seed%d" % i, title, (i + 1) * 3600000)
            t.open_page(d, chat.base + "/")
            d.find_element("id", "new-chat").click()
            t.send(d, "Write quicksort in Python and tell me how many comparisons it makes.")
            d.execute_script("document.querySelector('details.reasoning').open = true; "
                             "document.getElementById('messages').scrollTop = 0")
            d.save_screenshot(os.path.join(args.out, "webui-chat.png"))
            d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                              {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
            time.sleep(0.6)  # the sidebar slides away (a .2 s transition)
            d.execute_script("document.getElementById('messages').scrollTop = 200")
            d.save_screenshot(os.path.join(args.out, "webui-phone.png"))
            d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
            d.set_window_size(1280, 1480)
        finally:
            chat.stop()

        real = Server("-m", os.path.join(ROOT, "models", "all-MiniLM-L6-v2"), "--admin-key", "adm", threads=None)
        try:
            stop = threading.Event()

            def load():
                prompts = ["Tell me a story about a lighthouse.", "Explain photosynthesis.", "List ten fruits."]
                i = 0
                while not stop.is_set():
                    httpx.post(real.base + "/v1/chat/completions", timeout=60, json={
                        "messages": [{"role": "user", "content": prompts[i % 3]}], "max_tokens": 96})
                    i += 1
            threads = [threading.Thread(target=load) for _ in range(3)]
            for th in threads:
                th.start()
            t.open_page(d, real.base + "/dashboard")
            d.execute_script("localStorage.setItem('ferrox.theme', 'dark'); localStorage.setItem('ferrox.adminKey', 'adm')")
            t.open_page(d, real.base + "/dashboard")
            d.find_element("css selector", "#interval option[value='1000']").click()
            time.sleep(25)
            d.save_screenshot(os.path.join(args.out, "webui-dashboard.png"))
            stop.set()
            for th in threads:
                th.join()
        finally:
            real.stop()
    finally:
        d.quit()
    for name in ("webui-chat.png", "webui-phone.png", "webui-dashboard.png"):
        print(os.path.join(args.out, name), os.path.getsize(os.path.join(args.out, name)), "bytes")


if __name__ == "__main__":
    main()
