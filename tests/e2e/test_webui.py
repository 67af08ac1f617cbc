"""The chat page (/) and the dashboard (/dashboard) in a real browser: headless Chromium from
Debian driven by selenium, against the real server. One scripted server (two aliases of the
default model, answers from --test-script) covers rendering and the request the page sends; one
real server with an API key, an admin key and the embedding model covers the key prompt, the
model list, stopping a long answer and the dashboard. Every embedded file is checked for its
content type, and --no-webui for its 404s.

Skips only when Chromium or its driver cannot start (scripts/setup.sh installs both)."""
import json
import os
import re
import shutil
import time
from urllib.parse import urlparse

import httpx
import pytest

from conftest import MODEL, ROOT, Server, metric_value

EMBED = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
WEBUI = os.path.join(ROOT, "webui")
KEY = "sk-web"
ADMIN_KEY = "adm-web"

CODE_REPLY = ("Here is code:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\n"
              "Euler: $e^{i\\pi} + 1 = 0$ and\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n")
HTML_REPLY = ('Careful <script>window.__pwned = 1</script><img src="data:," onerror="window.__pwned = 2">'
              '<a href="javascript:window.__pwned = 3">link</a> <svg onload="window.__pwned = 4"></svg> **bold** '
              '[click](javascript:window.__pwned=5)')
# A trigger anywhere in the conversation selects its reply, the first rule first: the rules are
# in the reverse order of the tests that use them, so each test's message wins over the
# earlier ones of the same conversation.
SCRIPT = [
    {"when": "weather in Paris",
     "reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
    {"when": "think first", "reply": "<think>Two plus two is four.</think>The answer is 4."},
    {"when": "html please", "reply": HTML_REPLY},
    {"when": "code please", "reply": CODE_REPLY},
    {"when": "", "reply": "Scripted default answer."},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def chromium_paths():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"
    return browser, driver if os.path.exists(driver) else None


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        pytest.skip(f"selenium is not installed ({e}): run scripts/setup.sh --test")
    browser, drv = chromium_paths()
    if not browser or not drv:
        pytest.skip("chromium or chromium-driver is not installed: run scripts/setup.sh --test")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900", "--disable-background-networking", "--no-first-run",
              f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    try:
        d = webdriver.Chrome(service=Service(executable_path=drv), options=opts)
    except Exception as e:  # noqa: BLE001 - any failure to start the browser is the skip reason
        pytest.skip(f"chromium cannot start: {str(e).splitlines()[0]}")
    d.set_script_timeout(20)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    s = Server("-m", MODEL, "--alias", "chat-a", "--alias", "chat-b", "--test-script", str(path))
    wait_models(s, 2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def real():
    if not os.path.exists(os.path.join(EMBED, "model.safetensors")):
        pytest.skip(f"{EMBED} is missing: run `make model`")
    s = Server("-m", EMBED, "--api-key", KEY, "--admin-key", ADMIN_KEY)
    wait_models(s, 2, KEY)
    yield s
    s.stop()


def wait_models(s, n, key=None):
    """/health turns ready with the first model; the page must see all of them."""
    h = {"Authorization": "Bearer " + key} if key else {}
    end = time.time() + 60
    while len(httpx.get(s.base + "/v1/models", headers=h).json()["data"]) < n:
        assert time.time() < end, "the models did not load"
        time.sleep(0.1)


def wait(d, cond, timeout=15, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def js(d, script, *args):
    return d.execute_script(script, *args)


def open_page(d, url):
    d.get(url)
    wait(d, lambda: js(d, "return document.body.dataset.ready === '1'"), what="the page to start")


def record_requests(d):
    """Wraps fetch so the test sees each chat request's body as the page sends it."""
    js(d, """window.__requests = [];
        const f = (window.__fetch ??= window.fetch);
        window.fetch = (url, init) => {
          if (String(url).includes('chat/completions')) window.__requests.push(JSON.parse(init.body));
          return f(url, init);
        };""")


def send(d, text, n_answers=None):
    """Types `text`, sends it and waits until the answer has ended (its stats line)."""
    before = n_answers if n_answers is not None else len(d.find_elements("css selector", ".msg.assistant .stats"))
    box = d.find_element("id", "input")
    box.send_keys(text)
    d.find_element("id", "send").click()
    wait(d, lambda: len(d.find_elements("css selector", ".msg.assistant .stats")) > before, what="the answer to end")
    return d.find_elements("css selector", ".msg.assistant")[-1]


def save_settings(d, **fields):
    d.find_element("id", "settings-btn").click()
    for k, v in fields.items():
        el = d.find_element("id", "set-" + k)
        el.clear()
        if v:
            el.send_keys(v)
    d.find_element("id", "settings-save").click()
    wait(d, lambda: not js(d, "return document.getElementById('settings').open"), what="the settings to close")


def browser_errors(d):
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def foreign_requests(d, base):
    host = urlparse(base).netloc
    out = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] != "Network.requestWillBeSent":
            continue
        url = msg["params"]["request"]["url"]
        p = urlparse(url)
        # Chromium's own pages (chrome://new-tab-page before the first load) are not the network.
        if p.scheme not in ("http", "https", "ws", "wss", "ftp") or p.netloc == host:
            continue
        out.append(url)
    return out


# ---- the scripted server ---------------------------------------------------------------------

def test_answer_streams_ends_and_persists(driver, scripted):
    d = driver
    open_page(d, scripted.base + "/")
    js(d, "localStorage.clear()")
    open_page(d, scripted.base + "/")
    options = [o.text for o in d.find_elements("css selector", "#model option")]
    assert options == ["chat-a", "chat-b"]
    msg = send(d, "hello there")
    assert msg.find_element("css selector", ".content").text == "Scripted default answer."
    stats = msg.find_element("css selector", ".stats").text
    assert re.search(r"\d+ tokens · [\d.]+ tok/s · TTFT \d+ ms · \d+/\d+ prompt tokens cached · stop", stats), stats
    assert d.find_element("id", "send").is_displayed() and not d.find_element("id", "stop").is_displayed()
    # Reload: the conversation is in the list and opens with its messages.
    open_page(d, scripted.base + "/")
    convs = d.find_elements("css selector", "#conv-list .conv-open")
    assert [c.text for c in convs] == ["hello there"]
    convs[0].click()
    texts = [e.text for e in d.find_elements("css selector", ".msg .content")]
    assert texts == ["hello there", "Scripted default answer."]


def test_code_block_math_and_copy(driver, scripted):
    d = driver
    msg = send(d, "code please")
    code = msg.find_element("css selector", "pre code")
    assert "hljs" in code.get_attribute("class")
    assert code.find_elements("css selector", "span.hljs-keyword"), code.get_attribute("innerHTML")
    assert msg.find_element("css selector", ".code-bar .code-lang").text == "python"
    msg.find_element("css selector", ".copy-code").click()
    assert len(msg.find_elements("css selector", ".katex")) == 2
    assert msg.find_elements("css selector", ".math-display .katex")


def test_model_html_is_not_executed(driver, scripted):
    d = driver
    msg = send(d, "html please")
    content = msg.find_element("css selector", ".content")
    html = content.get_attribute("innerHTML")
    assert js(d, "return window.__pwned") is None
    # The model's HTML is shown as text; Markdown still renders; a javascript: link has no href.
    assert '<script>window.__pwned = 1</script>' in content.text and "onerror" in content.text
    assert not content.find_elements("css selector", "script, img, svg, [onerror], [onload]")
    assert content.find_element("css selector", "strong").text == "bold"
    assert "javascript:" not in (content.find_element("xpath", ".//a[text()='click']").get_attribute("href") or "")
    assert "<script" not in html


def test_settings_and_model_reach_the_request(driver, scripted):
    d = driver
    record_requests(d)
    save_settings(d, system="Be brief.", temperature="0.3", top_k="7", min_p="0.1", max_tokens="64",
                  extra=json.dumps({"seed": 42, "tools": TOOLS}))
    from selenium.webdriver.support.ui import Select
    Select(d.find_element("id", "model")).select_by_visible_text("chat-b")
    msg = send(d, "think first")
    body = js(d, "return window.__requests[window.__requests.length - 1]")
    assert body["model"] == "chat-b"
    assert body["temperature"] == 0.3 and body["top_k"] == 7 and body["min_p"] == 0.1 and body["max_tokens"] == 64
    assert body["seed"] == 42 and body["tools"][0]["function"]["name"] == "get_weather"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["stream_options"] == {"include_usage": True}
    assert msg.find_element("css selector", ".role").text == "chat-b"
    # Reasoning: a collapsed block with its text; the answer apart.
    details = msg.find_element("css selector", "details.reasoning")
    assert details.get_attribute("open") is None
    assert js(d, "return arguments[0].querySelector('.reasoning-text').textContent", details) == "Two plus two is four."
    assert msg.find_element("css selector", ".content").text == "The answer is 4."
    # A tool call, shown as such.
    msg = send(d, "What is the weather in Paris?")
    call = msg.find_element("css selector", ".tool-call")
    assert call.find_element("css selector", ".tool-name").text == "get_weather"
    assert json.loads(call.find_element("css selector", ".tool-args").text) == {"city": "Paris"}
    save_settings(d, system="", temperature="", top_k="", min_p="", max_tokens="", extra="")


def test_regenerate_edit_and_attach(driver, scripted, tmp_path):
    d = driver
    d.find_element("id", "new-chat").click()
    record_requests(d)
    send(d, "first question")
    n = len(d.find_elements("css selector", ".msg"))
    d.find_element("css selector", ".msg.assistant:last-child .regenerate").click()
    wait(d, lambda: js(d, "return window.__requests.length") == 2 and
         d.find_elements("css selector", ".msg.assistant:last-child .stats"), what="the regenerated answer")
    assert len(d.find_elements("css selector", ".msg")) == n
    # Edit the question: the answer after it is replaced, the request carries the new text.
    d.find_element("css selector", ".msg.user .edit").click()
    ta = d.find_element("css selector", ".edit-box textarea")
    ta.clear()
    ta.send_keys("code please")
    d.find_element("css selector", ".edit-box .save-send").click()
    wait(d, lambda: js(d, "return window.__requests.length") == 3 and
         d.find_elements("css selector", ".msg.assistant:last-child pre code"), what="the answer to the edited message")
    assert js(d, "return window.__requests[2].messages")[-1] == {"role": "user", "content": "code please"}
    assert len(d.find_elements("css selector", ".msg")) == 2
    # A text file attached: its content goes into the prompt.
    f = tmp_path / "notes.txt"
    f.write_text("the notes say 42")
    d.find_element("id", "attach-file").send_keys(str(f))
    wait(d, lambda: d.find_elements("css selector", "#attachments .chip"), what="the attachment chip")
    send(d, "summarize")
    last = js(d, "return window.__requests[3].messages")[-1]
    assert last["role"] == "user" and last["content"].startswith("summarize") and "the notes say 42" in last["content"]
    # The conversation list: two, the newest first, each titled by its first message as sent.
    titles = [c.text for c in d.find_elements("css selector", "#conv-list .conv-open")]
    assert titles == ["first question", "hello there"]


def test_import_and_theme(driver, scripted, tmp_path):
    d = driver
    f = tmp_path / "chats.json"
    f.write_text(json.dumps({"conversations": [{"title": "imported one", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}]}))
    d.find_element("id", "import-file").send_keys(str(f))
    wait(d, lambda: "imported one" in [c.text for c in d.find_elements("css selector", "#conv-list .conv-open")],
         what="the imported conversation")
    exported = json.loads(js(d, "return localStorage.getItem(Object.keys(localStorage).find(k => "
                                 "k.startsWith('ferrox.conv.') && localStorage.getItem(k).includes('imported one')))"))
    assert exported["messages"][1] == {"role": "assistant", "content": "a"}
    theme = js(d, "return document.documentElement.dataset.theme")
    d.find_element("id", "theme").click()
    assert js(d, "return document.documentElement.dataset.theme") != theme
    d.find_element("id", "theme").click()


def test_no_console_errors_and_no_other_host(driver, scripted):
    d = driver
    assert browser_errors(d) == []
    assert foreign_requests(d, scripted.base) == []


def test_every_asset_has_its_content_type(scripted):
    types = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
             ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json",
             ".woff2": "font/woff2"}
    urls = ["/", "/dashboard", "/webui/lib/manifest.json"]
    for dirpath, _, files in os.walk(WEBUI):
        urls += ["/webui/" + os.path.relpath(os.path.join(dirpath, f), WEBUI) for f in files]
    c = httpx.Client(base_url=scripted.base, headers={"Accept-Encoding": "gzip"})
    manifest = c.get("/webui/lib/manifest.json").json()
    libs = {"marked": ["/webui/lib/marked.min.js"], "dompurify": ["/webui/lib/purify.min.js"],
            "highlight": ["/webui/lib/highlight.min.js", "/webui/lib/hljs-light.css", "/webui/lib/hljs-dark.css"],
            "katex": ["/webui/lib/katex/katex.min.js", "/webui/lib/katex/katex.min.css"]}
    for name, lib_urls in libs.items():
        if manifest.get(name):
            urls += lib_urls
    if manifest.get("katex"):
        css = c.get("/webui/lib/katex/katex.min.css").text
        urls += sorted({"/webui/lib/katex/" + u for u in re.findall(r"url\((fonts/[^)]+\.woff2)\)", css)})
    for url in urls:
        r = c.get(url)
        ext = os.path.splitext(url)[1] or ".html"
        assert r.status_code == 200, url
        assert r.headers["content-type"] == types[ext], url
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.content, url
        # A second load is revalidated by ETag.
        assert c.get(url, headers={"If-None-Match": r.headers["etag"]}).status_code == 304, url
    # The page's own files read as text without gzip; the libraries come compressed.
    plain = httpx.get(scripted.base + "/", headers={"Accept-Encoding": "identity"})
    assert plain.headers.get("content-encoding") is None and plain.text.startswith("<!doctype html>")
    if manifest.get("highlight"):
        r = httpx.get(scripted.base + "/webui/lib/highlight.min.js", headers={"Accept-Encoding": "gzip"})
        assert r.headers["content-encoding"] == "gzip" and "hljs" in r.text
    assert "Content-Security-Policy" in plain.headers and "default-src 'self'" in plain.headers["content-security-policy"]


def test_no_webui_flag():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server("--no-webui")
    try:
        for path in ("/", "/dashboard", "/webui/style.css", "/webui/lib/manifest.json"):
            assert httpx.get(s.base + path).status_code == 404, path
        assert httpx.get(s.base + "/health").status_code == 200
    finally:
        s.stop()


# ---- the real server: API key, embedding model, stop, dashboard ------------------------------

def test_api_key_prompt_and_models(driver, real):
    d = driver
    open_page(d, real.base + "/")
    js(d, "localStorage.clear()")
    d.get(real.base + "/")  # the pages themselves need no key
    wait(d, lambda: js(d, "return document.getElementById('settings').open"), what="the API key prompt")
    assert d.find_element("id", "key-needed").is_displayed()
    d.find_element("id", "set-api-key").send_keys(KEY)
    d.find_element("id", "settings-save").click()
    wait(d, lambda: d.find_elements("css selector", "#model option"), what="the model list")
    # The embedding model is served, but not offered for chat.
    names = httpx.get(real.base + "/v1/models", headers={"Authorization": "Bearer " + KEY}).json()["data"]
    assert {m["id"] for m in names} == {"SmolLM2-135M-Instruct.Q4_1", "all-MiniLM-L6-v2"}
    assert [o.text for o in d.find_elements("css selector", "#model option")] == ["SmolLM2-135M-Instruct.Q4_1"]
    d.get_log("browser")  # the 401 the page answered with the prompt is expected


def running(real):
    text = httpx.get(real.base + "/metrics", headers={"Authorization": "Bearer " + KEY}).text
    return metric_value(text, "ferrox_requests_running")


def test_stop_a_long_answer(driver, real):
    d = driver
    save_settings(d, max_tokens="1500", extra=json.dumps({"ignore_eos": True}))
    d.find_element("id", "input").send_keys("Write a very long story about a lighthouse.")
    d.find_element("id", "send").click()
    content = lambda: js(d, "const m = document.querySelectorAll('.msg.assistant .content'); "
                            "return m.length ? m[m.length - 1].textContent : ''")
    first = wait(d, lambda: len(content()) > 20 and content(), what="the answer to start")
    wait(d, lambda: len(content()) > len(first), what="the answer to grow (stream)")
    assert running(real) == 1
    assert not d.find_element("id", "send").is_displayed()
    d.find_element("id", "stop").click()
    wait(d, lambda: d.find_elements("css selector", ".msg.assistant .stats"), what="the stopped answer")
    assert "stopped" in d.find_element("css selector", ".msg.assistant .stats").text
    wait(d, lambda: running(real) == 0, timeout=10, what="ferrox_requests_running to return to 0")
    assert d.find_element("id", "send").is_displayed() and not d.find_element("id", "stop").is_displayed()
    save_settings(d, max_tokens="", extra="")
    assert browser_errors(d) == []


def test_dashboard(driver, real):
    d = driver
    open_page(d, real.base + "/dashboard")
    # The key entered on the chat page is this browser's: the dashboard reads /metrics with it.
    wait(d, lambda: re.fullmatch(r"\d+", d.find_element("id", "card-requests").text), what="the request count")
    assert int(d.find_element("id", "card-requests").text) >= 1
    assert re.fullmatch(r"\d+ / \d+ / \d+", d.find_element("id", "card-kv").text)
    assert re.fullmatch(r"\d+ ms|\d+ / \d+ ms", d.find_element("id", "card-ttft").text) or \
        re.fullmatch(r"\d+ / \d+ ms", d.find_element("id", "card-ttft").text)
    wait(d, lambda: re.fullmatch(r"[\d.]+", d.find_element("id", "card-gen-tps").text), what="a token rate (second poll)")
    assert d.find_element("id", "card-running").text == "0 / 0"
    rows = d.find_elements("css selector", "#models tr")
    assert {r.get_attribute("data-model") for r in rows} == {"SmolLM2-135M-Instruct.Q4_1", "all-MiniLM-L6-v2"}
    assert not d.find_element("id", "admin").is_displayed()
    # With the admin key: memory per model and the actions.
    d.find_element("id", "admin-key").send_keys(ADMIN_KEY + "\t")
    wait(d, lambda: d.find_element("id", "admin").is_displayed(), what="the admin section")
    row = wait(d, lambda: d.find_elements("css selector", "#models tr[data-model='all-MiniLM-L6-v2']"), what="rows")[0]
    assert "MiB" in row.text
    row.find_element("xpath", ".//button[text()='Unload']").click()
    d.switch_to.alert.accept()
    gone = "const r = document.querySelector(\"#models tr[data-model='all-MiniLM-L6-v2']\"); " \
           "return !r || r.textContent.includes('draining')"
    wait(d, lambda: js(d, gone), what="the unloaded model to leave the table")
    assert browser_errors(d) == []
    assert foreign_requests(d, real.base) == []
