"""Stored Responses in a real database (issue 47, part 4): `--state-dir DIR` keeps them in
DIR/responses.sqlite3 (WAL), so a `previous_response_id` chain continues after a restart; they
are bounded in count (`--responses-max`) and age (`--responses-ttl`); a response is only
returned to the API key that created it (another key gets the same 404 as an unknown id); a
damaged database file is a one-line startup error (the server does not start rather than
throw away what the file holds); hostile flag values are refused with a message."""
import json
import os
import sqlite3
import subprocess
import time

import httpx
import openai
import pytest

from conftest import BIN, MODEL, SCRIPT, Server

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"{MODEL} is missing: run `make model`")


@pytest.fixture
def script(tmp_path):
    p = tmp_path / "script.json"
    p.write_text(json.dumps(SCRIPT))
    return str(p)


def client(s, key="unused"):
    return openai.OpenAI(base_url=s.base + "/v1", api_key=key, max_retries=0, timeout=60)


def test_chain_continues_after_restart(tmp_path, script):
    state = tmp_path / "state"
    s = Server("--test-script", script, "--state-dir", str(state))
    try:
        first = client(s).responses.create(model="m", input="think first: what is two plus two?")
        assert first.status == "completed"
        assert "4" in first.output_text
        second = client(s).responses.create(model="m", input="And once more?", previous_response_id=first.id)
        assert second.status == "completed"
    finally:
        assert s.stop() == 0
    db = state / "responses.sqlite3"
    assert db.exists()
    con = sqlite3.connect(str(db))
    try:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 2
    finally:
        con.close()

    s = Server("--test-script", script, "--state-dir", str(state))
    try:
        c = client(s)
        got = c.responses.retrieve(second.id)
        assert got.id == second.id and got.output_text == second.output_text
        items = c.responses.input_items.list(first.id)
        assert [i.content[0].text for i in items.data] == ["think first: what is two plus two?"]
        third = c.responses.create(model="m", input="And a third time?", previous_response_id=second.id)
        assert third.status == "completed"
        # The whole history (two earlier turns) is in the prompt: more input than the second turn.
        assert third.usage.input_tokens > second.usage.input_tokens > first.usage.input_tokens
        # Deleted stays deleted across the store.
        c.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(first.id)
    finally:
        assert s.stop() == 0


def test_count_bound_oldest_first(tmp_path, script):
    s = Server("--test-script", script, "--state-dir", str(tmp_path / "st"), "--responses-max", "2")
    try:
        c = client(s)
        ids = [c.responses.create(model="m", input=f"hello {i}").id for i in range(3)]
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(ids[0])
        assert c.responses.retrieve(ids[1]).id == ids[1]
        assert c.responses.retrieve(ids[2]).id == ids[2]
        with pytest.raises(openai.NotFoundError):
            c.responses.create(model="m", input="more", previous_response_id=ids[0])
    finally:
        s.stop()


@pytest.mark.parametrize("persistent", [True, False])
def test_expiry(tmp_path, script, persistent):
    extra = ["--state-dir", str(tmp_path / "st")] if persistent else []
    s = Server("--test-script", script, "--responses-ttl", "1", *extra)
    try:
        c = client(s)
        rid = c.responses.create(model="m", input="hello").id
        assert c.responses.retrieve(rid).id == rid
        time.sleep(1.5)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(rid)
        with pytest.raises(openai.NotFoundError):
            c.responses.create(model="m", input="more", previous_response_id=rid)
    finally:
        s.stop()


@pytest.mark.parametrize("persistent", [True, False])
def test_another_key_gets_404(tmp_path, script, persistent):
    extra = ["--state-dir", str(tmp_path / "st")] if persistent else []
    s = Server("--test-script", script, "--api-key", "sk-one", "--api-key", "sk-two", *extra)
    try:
        one, two = client(s, "sk-one"), client(s, "sk-two")
        rid = one.responses.create(model="m", input="hello").id
        with pytest.raises(openai.NotFoundError):
            two.responses.retrieve(rid)
        with pytest.raises(openai.NotFoundError):
            two.responses.input_items.list(rid)
        with pytest.raises(openai.NotFoundError):
            two.responses.create(model="m", input="more", previous_response_id=rid)
        with pytest.raises(openai.NotFoundError):
            two.responses.delete(rid)
        # The 404 is the one an unknown id gets (nothing tells that the id exists).
        a = httpx.get(s.base + f"/v1/responses/{rid}", headers={"Authorization": "Bearer sk-two"})
        b = httpx.get(s.base + "/v1/responses/resp_doesnotexist", headers={"Authorization": "Bearer sk-two"})
        assert a.status_code == b.status_code == 404
        assert a.json()["error"]["code"] == b.json()["error"]["code"]
        # Still there for its owner, also through Anthropic's header.
        assert one.responses.retrieve(rid).id == rid
        r = httpx.get(s.base + f"/v1/responses/{rid}", headers={"x-api-key": "sk-one"})
        assert r.status_code == 200
        assert one.responses.create(model="m", input="more", previous_response_id=rid).status == "completed"
    finally:
        s.stop()
    if persistent:
        raw = (tmp_path / "st" / "responses.sqlite3").read_bytes()
        wal = tmp_path / "st" / "responses.sqlite3-wal"
        if wal.exists():
            raw += wal.read_bytes()
        assert b"sk-one" not in raw and b"sk-two" not in raw, "the API key itself must never be stored"


def run_serve(*extra, timeout=30):
    return subprocess.run([BIN, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "1", *extra],
                          capture_output=True, text=True, timeout=timeout)


def test_damaged_database_is_a_startup_error(tmp_path):
    state = tmp_path / "st"
    state.mkdir()
    db = state / "responses.sqlite3"
    db.write_bytes(b"this is not a database " * 400)
    p = run_serve("--state-dir", str(state))
    assert p.returncode not in (0,) and p.returncode > 0
    errors = [l for l in (p.stdout + p.stderr).splitlines() if "responses.sqlite3" in l]
    assert len(errors) == 1, p.stdout + p.stderr
    assert "move the file away" in errors[0]
    # The file is left as it was.
    assert db.read_bytes() == b"this is not a database " * 400


@pytest.mark.parametrize("flags", [
    ["--responses-ttl", "-1"], ["--responses-ttl", "abc"], ["--responses-ttl", "nan"], ["--responses-ttl", "1e30"],
    ["--responses-max", "0"], ["--responses-max", "-5"], ["--responses-max", "x"], ["--responses-max-mib", "0"],
    ["--responses-max-mib", "99999999999"], ["--state-dir", ""], ["--state-dir", "/proc/self/ferrox-cannot-be-here"],
])
def test_hostile_flags(flags):
    p = run_serve(*flags)
    assert p.returncode > 0, (flags, p.stdout, p.stderr)
    out = (p.stdout + p.stderr).strip()
    assert out and "Segmentation" not in out


def test_state_dir_that_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    p = run_serve("--state-dir", str(f))
    assert p.returncode > 0
    assert "--state-dir" in p.stdout + p.stderr


# Redis (`--responses-store redis://HOST:PORT`): replicas share stored Responses. Debian's
# redis-server, started by the test on a free port and stopped after.
import shutil  # noqa: E402
import socket  # noqa: E402

from conftest import free_port  # noqa: E402

REDIS = shutil.which("redis-server")


@pytest.fixture
def redis(tmp_path):
    if not REDIS:
        pytest.skip("redis-server is not installed (Debian package redis-server; scripts/setup.sh --test)")
    port = free_port()
    proc = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def test_redis_replicas_share_a_chain(redis, script):
    a = Server("--test-script", script, "--responses-store", redis, "--api-key", "sk-one", "--api-key", "sk-two")
    b = Server("--test-script", script, "--responses-store", redis + "/0", "--api-key", "sk-one", "--api-key", "sk-two")
    try:
        first = client(a, "sk-one").responses.create(model="m", input="think first: two plus two?")
        # The next turn lands on the other replica.
        second = client(b, "sk-one").responses.create(model="m", input="Again?", previous_response_id=first.id)
        assert second.status == "completed"
        assert second.usage.input_tokens > first.usage.input_tokens
        assert client(a, "sk-one").responses.retrieve(second.id).output_text == second.output_text
        items = client(b, "sk-one").responses.input_items.list(first.id)
        assert [i.content[0].text for i in items.data] == ["think first: two plus two?"]
        # Another key: 404 everywhere, on either replica.
        for s in (a, b):
            with pytest.raises(openai.NotFoundError):
                client(s, "sk-two").responses.retrieve(first.id)
            with pytest.raises(openai.NotFoundError):
                client(s, "sk-two").responses.delete(first.id)
            with pytest.raises(openai.NotFoundError):
                client(s, "sk-two").responses.create(model="m", input="x", previous_response_id=first.id)
        client(b, "sk-one").responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            client(a, "sk-one").responses.retrieve(first.id)
    finally:
        a.stop()
        b.stop()


def test_redis_survives_a_replica_restart_and_bounds(redis, script):
    s = Server("--test-script", script, "--responses-store", redis, "--responses-max", "2")
    try:
        ids = [client(s).responses.create(model="m", input=f"hi {i}").id for i in range(3)]
    finally:
        s.stop()
    s = Server("--test-script", script, "--responses-store", redis, "--responses-ttl", "1")
    try:
        c = client(s)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(ids[0])
        assert c.responses.retrieve(ids[2]).id == ids[2]
        rid = c.responses.create(model="m", input="short-lived").id
        assert c.responses.retrieve(rid).id == rid
        time.sleep(1.5)
        with pytest.raises(openai.NotFoundError):
            c.responses.retrieve(rid)
    finally:
        s.stop()


def test_redis_unreachable_is_a_startup_error():
    port = free_port()  # nothing listens there
    p = run_serve("--responses-store", f"redis://127.0.0.1:{port}")
    assert p.returncode > 0
    lines = [l for l in (p.stdout + p.stderr).splitlines() if "redis://" in l]
    assert len(lines) == 1 and "cannot connect" in lines[0], p.stdout + p.stderr


@pytest.mark.parametrize("url", ["redis://", "http://127.0.0.1:6379", "redis://127.0.0.1:99999", "redis://:pw@h:1",
                                 "redis://127.0.0.1:6379/abc", "redis://[::1", ""])
def test_redis_hostile_urls(url):
    p = run_serve("--responses-store", url)
    assert p.returncode > 0, (url, p.stdout, p.stderr)
    assert "--responses-store" in p.stdout + p.stderr


def test_state_dir_and_redis_together_refused(tmp_path):
    p = run_serve("--state-dir", str(tmp_path), "--responses-store", "redis://127.0.0.1:1")
    assert p.returncode > 0 and "not both" in p.stdout + p.stderr
