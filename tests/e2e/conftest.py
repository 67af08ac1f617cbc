"""Starts the real `ferrox serve` on a free loopback port for the e2e tests and stops it after."""
import os
import socket
import subprocess
import time

import httpx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("FERROX_BIN", os.path.join(ROOT, "build/bin/ferrox"))
MODEL = os.environ.get("FERROX_MODEL", os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    # threads: `-t` (None: ferrox's default, a thread per core, where stream parsers and sinks
    # run on the engine thread: server/README.md; test_protocols.py serves every route so).
    def __init__(self, *extra, threads=1):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        t = ["-t", str(threads)] if threads is not None else []
        self.proc = subprocess.Popen(
            [BIN, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(self.port), *t,
             "-c", "2048", "-np", "4", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ferrox serve exited: " + self.proc.stdout.read())
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("ferrox serve did not become ready")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server()
    yield s
    rc = s.stop()
    assert rc == 0, "SIGTERM must end the server with exit code 0"


@pytest.fixture(scope="session")
def keyed_server():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server("--api-key", "sk-one", "--api-key", "sk-two")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def tiny_queue_server():
    """One slot and room for one waiting request: the third concurrent request gets a 429."""
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server("-np", "1", "--max-queue", "1")
    yield s
    s.stop()


# Scripted answers (ferrox serve --test-script): the real server, tokenizer and engine, with a
# stand-in model that replays these replies, so every parser path runs end to end. More
# specific triggers first: a trigger anywhere in the conversation selects its reply.
SCRIPT = [
    {"when": "22 degrees", "reply": "It is 22 degrees and sunny in Paris."},
    {"when": "weather in Paris",
     "reply": "<think>The user wants the weather. I should call the tool.</think>"
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"},
    {"when": "two cities",
     "reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
    {"when": "broken call", "reply": "Let me try. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "},
    {"when": "think first", "reply": "<think>Two plus two is four.</think>The answer is 4."},
    {"when": "", "reply": "Scripted default answer."},
]


@pytest.fixture(scope="session")
def scripted_server(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    import json
    path = tmp_path_factory.mktemp("script") / "script.json"
    path.write_text(json.dumps(SCRIPT))
    s = Server("--test-script", str(path))
    yield s
    s.stop()


def metric_value(text, name):
    """The sum over models of a Prometheus sample `name` (every series carries a model label)."""
    import re
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name and "le=" not in (m.group(2) or ""):
            total += float(m.group(3))
            seen = True
    if not seen:
        raise KeyError(name)
    return total
