"""The room's parts without a hub: the kernel's client outside a room, payload validation, the store and its
migrations on SQLite and on a real PostgreSQL server of the test's own, the hub's configuration, the command,
and the Kubernetes values. The room on a real hub is tests/test_room.py."""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

import shapelab as S
from chromium import browser  # noqa: F401 (the fixture the page is read with)
from shapelab.room import client, learning, store
from shapelab.room.hub import INSTRUCTOR_SCOPES, LANDING, Room, configure
from shapelab.room.service import FIELDS, MAX_BODY, validate

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"


def test_client_outside_a_room_sends_nothing_and_costs_nothing(monkeypatch):
    """No hub token or no room URL: reveal and check print exactly what they printed before, at no cost."""
    for present in [{}, {"JUPYTERHUB_API_TOKEN": "x"}, {"SHAPELAB_ROOM_URL": "http://127.0.0.1:9"}]:
        for name in (client.URL_ENV, client.TOKEN_ENV):
            monkeypatch.delenv(name, raising=False)
        for name, value in present.items():
            monkeypatch.setenv(name, value)
        out = io.StringIO()
        with redirect_stdout(out):
            assert S.reveal(2, 2, "graphs") is True
            S.Checker("lab").check("ex", True, "ok")
        assert out.getvalue() == "You predicted 2; the run measured 2 graphs: as you predicted.\n✅ ex: ok\n"
        assert client.record_reveal(1, 1, "", True) is None and client.record_check("l", "e", True, 1) is None
    start = time.perf_counter()
    for _ in range(10_000):
        client.record_reveal(1, 1, "", True)
    assert (time.perf_counter() - start) / 10_000 < 50e-6  # two environment lookups, no import, no socket


def test_client_says_in_one_line_when_the_room_is_away(monkeypatch):
    """A refused connection: one line, no exception, the lesson's own line still printed."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before use: nothing listens there
    monkeypatch.setenv(client.URL_ENV, f"http://127.0.0.1:{port}/services/room")
    monkeypatch.setenv(client.TOKEN_ENV, "token")
    out = io.StringIO()
    with redirect_stdout(out):
        assert S.reveal(3, 2, "graphs") is False
    lines = out.getvalue().splitlines()
    assert lines[0] == "You predicted 3; the run measured 2 graphs: not what you predicted."
    assert len(lines) == 2 and lines[1].startswith("(room: this prediction was not recorded for the instructor: ")


def test_client_names_the_prompt_by_the_line_that_revealed_it(monkeypatch):
    sent = []
    monkeypatch.setattr(client, "_send", lambda kind, record: sent.append((kind, record)))
    monkeypatch.setenv(client.URL_ENV, "http://room")
    monkeypatch.setenv(client.TOKEN_ENV, "token")
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/alice/notebooks/02_zero_one_specialisation.ipynb")
    with redirect_stdout(io.StringIO()):
        S.reveal([1, 2], (1, 2), "graphs after each call")  # the line the instructor sees
        S.Checker("02_lab").check("batch one", False, "no")
    (kind, reveal), (kind2, check) = sent
    assert kind == "reveal" and reveal == {"lesson": "02_zero_one_specialisation", "predicted": "[1, 2]",
                                           "measured": "(1, 2)", "agreed": True,
                                           "prompt": 'S.reveal([1, 2], (1, 2), "graphs after each call")  # the line the instructor sees'}
    assert kind2 == "check" and check == {"lab": "02_lab", "exercise": "batch one", "passed": False, "attempt": 1}


def test_client_sends_a_prediction_left_unanswered_as_such(monkeypatch):
    """``predicted = ...``: the lesson prints what it did, and the room gets a record with predicted and agreed
    null, counted as left unanswered, not as a prediction."""
    sent = []
    monkeypatch.setattr(client, "_send", lambda kind, record: sent.append(record))
    monkeypatch.setenv(client.URL_ENV, "http://room")
    monkeypatch.setenv(client.TOKEN_ENV, "token")
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/alice/notebooks/01_symbolic_guards-Copy1.ipynb")
    out = io.StringIO()
    with redirect_stdout(out):
        assert S.reveal(..., 2, "graphs") is None
    assert out.getvalue() == "No prediction written (predicted = ...); the run measured 2 graphs.\n"
    (record,) = sent
    assert record["predicted"] is None and record["agreed"] is None and record["measured"] == "2"
    assert record["lesson"] == "01_symbolic_guards"  # JupyterLab's copy counts as its lesson


def test_client_says_once_that_the_room_limits_it_and_goes_on(monkeypatch):
    """A service answering 429: the kernel's first record says so in one line, the next ones are not sent until
    Retry-After has passed and say nothing; no traceback."""
    import http.server
    import threading

    hits = []

    class Limited(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            hits.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(429)
            self.send_header("Retry-After", "30")
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": "too many", "status": 429}')

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Limited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(client, "_limited", {"until": 0.0, "said": False})
    monkeypatch.setenv(client.URL_ENV, f"http://127.0.0.1:{server.server_port}/services/room")
    monkeypatch.setenv(client.TOKEN_ENV, "token")
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            for _ in range(5):
                assert S.reveal(2, 2, "graphs") is True
                S.Checker("lab").check("ex", True, "ok")
    finally:
        server.shutdown()
        server.server_close()
    room_lines = [line for line in out.getvalue().splitlines() if line.startswith("(room:")]
    assert len(room_lines) == 1 and "this is said once" in room_lines[0], out.getvalue()
    assert len(hits) == 1  # nothing more sent while the room said to wait
    assert out.getvalue().count("You predicted 2") == 5 and "Traceback" not in out.getvalue()


def _good(kind: str) -> dict:
    if kind == "inventory":
        item = learning.course_bank().items("B")[0]
        return {"id": uuid.uuid4().hex, "form": "B", "item": item.id, "phase": "post", "choice": "e"}
    return _reveal() if kind == "reveal" else _check()


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_validate_accepts_records_and_rejects_everything_else(kind):
    import json

    good, bank = _good(kind), learning.course_bank()
    assert validate(kind, json.dumps(good).encode(), _manifest(), bank) == good
    bad = [b"", b"nul", b"\xff\xfe", b"[]", b'"text"', json.dumps({**good, "user": "bob"}).encode(),
           json.dumps({k: v for k, v in good.items() if k != "id"}).encode(),
           json.dumps({**good, "id": "X" * 32}).encode(), b"{" + b" " * MAX_BODY + b"}"]
    for field, types in FIELDS[kind].items():
        wrong = {str: 1, bool: 1, int: True}[types[0]]  # bool is not int here, nor int bool
        bad.append(json.dumps({**good, field: wrong}).encode())
        if types[0] is str and field != "id":
            bad += [json.dumps({**good, field: ""}).encode(), json.dumps({**good, field: "x" * 201}).encode()]
    if kind == "reveal":  # left unanswered is predicted and agreed null, both or neither
        assert validate(kind, json.dumps(good | {"predicted": None, "agreed": None}).encode(), _manifest())
        bad += [json.dumps(good | {"predicted": None}).encode(), json.dumps(good | {"agreed": None}).encode()]
    if kind == "inventory":  # null: the key was shown; the item must be the form's, named exactly
        assert validate(kind, json.dumps(good | {"choice": None}).encode(), _manifest(), bank)
        bad += [json.dumps(good | change).encode() for change in ({"form": "A"}, {"item": good["item"].lower()},
                                                                  {"phase": "after"}, {"choice": "A"})]
    for body in bad:
        with pytest.raises(ValueError):
            validate(kind, body, _manifest(), bank)


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of this module's own on the loopback (Debian's ``postgresql``, run as its user when
    we are root); yields the URL without a database name; stopped by its PID."""
    initdb = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not initdb:
        if os.environ.get("CI") == "true":
            pytest.fail("no PostgreSQL server (Debian's postgresql); .ci/run installs it")
        pytest.skip("no PostgreSQL server installed (apt-get install postgresql)")
    bindir = initdb[-1].parent
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="shapelab-pg-"))
    if as_owner:
        shutil.chown(base, "postgres", "postgres")
    subprocess.run([*as_owner, str(bindir / "initdb"), "-D", str(base / "data"), "-U", "postgres", "--auth=trust",
                    "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([*as_owner, str(bindir / "postgres"), "-D", str(base / "data"), "-p", str(port),
                             "-h", "127.0.0.1", "-k", str(base)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                sa.create_engine(f"{url}/postgres").connect().close()
                break
            except sa.exc.OperationalError:
                if proc.poll() is not None or time.time() > deadline:
                    raise AssertionError("the test's PostgreSQL server did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A new, empty database: a SQLite file, or a database of its own on the test's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'room.sqlite'}"
    server = request.getfixturevalue("postgres")
    name = f"room_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return f"{server}/{name}"


def test_store_migrates_an_old_database_and_keeps_its_records(db_url):
    url = db_url
    engine = store.connect(url)
    assert store.migrate(engine, to=1) == 0  # a room from before the indexes
    record = {"id": uuid.uuid4().hex, "user": "alice", "lesson": "l", "prompt": "p", "predicted": "1",
              "measured": "2", "agreed": False, "at": 1.0}
    with engine.begin() as conn:
        conn.execute(store.reveals.insert().values(**record))
    engine.dispose()
    s = store.Store(url)  # migrates to the latest version on start
    assert sa.inspect(s.engine).get_indexes("reveals")[0]["name"] == "reveals_by_prompt"
    with s.engine.connect() as conn:
        assert conn.execute(sa.select(store.schema_version.c.version)).scalar() == store.VERSION
        if s.engine.dialect.name == "sqlite":
            assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
    assert [(r["id"], r["answered"], r["round"], r["instructor_run"]) for r in s.records("reveal")] == \
        [(record["id"], True, 1, False)]  # v3, v4, v5
    assert store.migrate(s.engine) == store.VERSION  # a second start changes nothing
    with s.engine.begin() as conn:
        conn.execute(store.schema_version.update().values(version=store.VERSION + 1))
    with pytest.raises(store.NewerSchema):
        store.Store(url)
    s.engine.dispose()


def test_store_counts_the_room(db_url):
    """Per prompt: each learner's first answer once, answered apart from left unanswered apart from not reached;
    per lab: every exercise in the lab's order before anyone checks; the CSV has every record."""
    m = _manifest()
    s = store.Store(db_url)
    lesson = m.lessons[1]
    for user, predicted in [("alice", "3"), ("bob", "2"), ("carol", None), ("alice", "2")]:  # alice changes her mind after the run: her first answer counts
        assert s.add("reveal", user, _reveal(lesson.id, 0, predicted=predicted, measured="3",
                                             agreed=None if predicted is None else predicted == "3"))
    again = _check(0, 1, passed=False)
    assert s.add("check", "alice", again) and not s.add("check", "alice", again)  # the same id is stored once
    s.add("check", "bob", _check(0, 1))
    room = s.room(m, ["alice", "bob", "carol", "dave"], "on the roster")
    assert room["learners"]["n"] == 4 and room["learners"]["basis"] == "on the roster"
    prompt = next(x for x in room["lessons"] if x["id"] == lesson.id)["prompts"][0]
    assert prompt["question"] == lesson.prompts[0].question and prompt["line"] == lesson.prompts[0].line
    # right by alice's own kernel (no instructor ran it yet); her change after the run is not counted
    assert sorted(prompt["predictions"]) == [["2", 1, 0], ["3", 1, 1]] and prompt["measured"] == [["3", 3]]
    assert prompt["reference"] is None and prompt["right"] == 1
    assert (prompt["answered"], prompt["unanswered"], prompt["not_reached"]) == (2, 1, 1)
    assert room["follow"] == {"lesson": lesson.id, "index": 0}
    lab = room["labs"][0]
    assert lab["title"] == m.labs[0].title and [e["name"] for e in lab["exercises"]] == list(m.labs[0].exercises)
    assert lab["exercises"][1] == {"name": m.labs[0].exercises[1], "passed": 1, "tried": 1, "not_started": 2}
    assert all(e["not_started"] == 4 for lab in room["labs"][1:] for e in lab["exercises"])  # listed, not started
    lines = s.export_csv().splitlines()
    assert lines[0].startswith("kind,user,time") and len(lines) == 1 + 4 + 2
    assert s.remove("bob", by="teach") == {"reveals": 1, "checks": 1, "inventory": 0}
    s.engine.dispose()
    again = store.Store(db_url)  # a restarted service reads what was acknowledged, and what was removed
    assert {r["user"] for r in again.records("reveal")} == {"alice", "carol"} and len(again.records("reveal")) == 3
    assert [(r["user"], r["removed_by"]) for r in again.room(m, [], "")["removals"]] == [("bob", "teach")]
    again.engine.dispose()


def test_store_ddl_for_postgresql():
    """The statements each migration sends to PostgreSQL, as SQLAlchemy's PostgreSQL dialect writes them (the
    tests above run them on a live server too)."""
    emitted = []
    engine = sa.create_mock_engine("postgresql+psycopg2://", lambda sql, *a, **k: emitted.append(
        str(sql.compile(dialect=engine.dialect))))
    for step in store.MIGRATIONS:
        step(engine)
    text = "\n".join(emitted)
    assert "CREATE TABLE reveals" in text and "CREATE TABLE checks" in text
    assert "agreed BOOLEAN NOT NULL" in text and "PRIMARY KEY (id)" in text
    assert "CREATE INDEX reveals_by_prompt ON reveals (lesson, prompt)" in text
    assert "ALTER TABLE reveals ADD COLUMN answered BOOLEAN NOT NULL DEFAULT TRUE" in text and "CREATE TABLE removals" in text
    assert 'ALTER TABLE reveals ADD COLUMN "round" INTEGER NOT NULL DEFAULT 1' in text and "CREATE TABLE rounds" in text
    assert "CREATE TABLE inventory" in text and "choice VARCHAR(8)," in text and "CREATE TABLE forms" in text
    assert "ALTER TABLE reveals ADD COLUMN instructor_run BOOLEAN NOT NULL DEFAULT FALSE" in text


def test_hub_configuration():
    from traitlets.config import Config

    c = Config()
    room = Room(course=str(ROOT), state="/srv/room", homes="/home", instructor="teach", learners=["a", "b"],
                learner_python="/srv/room-python/bin/python")
    configure(c, room)
    assert c.JupyterHub.authenticator_class == "firstuseauthenticator.FirstUseAuthenticator"
    assert "admin_users" not in c.Authenticator and c.Authenticator.allowed_users == {"a", "b", "teach"}
    roles = {r["name"]: r for r in c.JupyterHub.load_roles}
    assert roles["instructor"] == {"name": "instructor", "users": ["teach"], "scopes": INSTRUCTOR_SCOPES}
    assert roles["admin"]["users"] == []  # no hub admin: a learner's page opened by the instructor gets no admin rights
    assert c.FirstUseAuthenticator.create_users is False  # a roster: nobody else signs up
    assert c.Spawner.default_url == LANDING and (ROOT / LANDING.removeprefix("/lab/tree/")).is_file()
    assert c.Spawner.cmd == ["/srv/room-python/bin/python", "-m", "jupyterhub.singleuser"]
    assert "access:services!service=room" in c.Spawner.server_token_scopes
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert "--db" not in services["room"]["command"]  # a URL may hold a password: every learner reads argv
    assert services["room"]["environment"]["SHAPELAB_ROOM_DB"] == "sqlite:////srv/room/room.sqlite"
    assert services["room"]["environment"]["SHAPELAB_ROOM_INSTRUCTORS"] == "teach"
    assert "--timeout=3600" in services["idle-culler"]["command"]
    open_room = Config()
    configure(open_room, Room(course=str(ROOT), state="/srv/room", homes="/home"))
    assert open_room.FirstUseAuthenticator.create_users is True and open_room.Authenticator.allow_all is True


def test_room_command_help_and_check(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PATH"} | {"PATH": os.path.dirname(sys.executable)}
    out = subprocess.run([sys.executable, "-m", "shapelab.tools.room", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--roster" in out.stdout and "--instructor" in out.stdout
    roster = tmp_path / "roster.txt"
    roster.write_text("# the room\nalice\nbob  # late\n\n")
    # without configurable-http-proxy on PATH: --check names what is missing and exits 1
    out = subprocess.run([sys.executable, "-m", "shapelab.tools.room", "--check", "--roster", str(roster),
                          "--state", str(tmp_path / "state")], capture_output=True, text=True, env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "missing: configurable-http-proxy" in out.stdout and "NOT READY" in out.stdout
    assert "2 learners from" in out.stdout


def test_the_hub_stops_a_service_that_ignores_sigint_within_seconds():
    """JupyterHub stops its managed services one at a time, SIGINT and then SIGTERM after the service spawner's
    ``interrupt_timeout`` (10 s by default); the room's configuration makes that 1 s. A service deaf to SIGINT
    (as both were in CI runs, where the hub's stop then passed the room's 30 s limit) is stopped by JupyterHub's own
    stop in about a second."""
    import asyncio

    from traitlets.config import Config

    configure(Config(), Room(course=str(ROOT), state="/srv/room", homes="/home"))
    from jupyterhub.services.service import _ServiceSpawner

    deaf = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(flush=True); time.sleep(120)"
    service = subprocess.Popen([sys.executable, "-c", deaf], stdout=subprocess.PIPE)
    try:
        service.stdout.readline()  # it ignores SIGINT from here on
        spawner = _ServiceSpawner(cmd=["the room service"])
        spawner.proc, spawner.pid = service, service.pid
        began = time.monotonic()
        asyncio.run(spawner.stop())
        took = time.monotonic() - began
        assert service.poll() == -signal.SIGTERM, service.poll()
        assert took < 5, f"the stop took {took:.1f} s: the service's 10 s of SIGINT grace were waited out"
    finally:
        if service.poll() is None:
            service.kill()


def test_kubernetes_values_and_binder_files():
    """Parsed only: no cluster and no image build run here (INSTRUCTOR.md says what is untested)."""
    values = yaml.safe_load((ROOT / "deploy/z2jh/values.yaml").read_text())
    assert values["hub"]["services"]["room"]["command"][:3] == ["python3", "-m", "shapelab.room.service"]
    assert values["hub"]["db"]["type"] == "postgres"
    assert values["singleuser"]["defaultUrl"] == LANDING
    assert values["cull"]["enabled"] is True
    gpu = [p["kubespawner_override"]["extra_resource_limits"] for p in values["singleuser"]["profileList"][1:]]
    assert gpu[0] == {"nvidia.com/gpu": "1"} and list(gpu[1])[0].startswith("nvidia.com/mig-")
    assert values["hub"]["loadRoles"]["user"]["scopes"] == ["self", "access:services!service=room"]
    assert "access:services!service=room" in values["hub"]["extraConfig"]["room"]
    env = yaml.safe_load((ROOT / "binder/environment.yml").read_text())
    assert env["dependencies"][-1] == {"pip": ["-r ../requirements.txt"]}
    post = ROOT / "binder/postBuild"
    assert os.access(post, os.X_OK) and "shapelab.tools.warmup" in post.read_text()


# --- the service over HTTP, without a hub: the hub's answer to "who is this?" is faked from the token -----

M = None  # the manifest, read once below


def _manifest():
    global M
    if M is None:
        from shapelab.room import manifest
        M = manifest.load()
    return M


def test_manifest_is_what_the_notebooks_give():
    """The checked-in manifest is what notebooks/ and solutions/ give now (regenerate: python -m
    shapelab.room.manifest); every lesson's reveal has its question, every lab its exercises."""
    from shapelab.room import manifest

    assert manifest.text(manifest.build(ROOT)) == manifest.PATH.read_text(), \
        "utils/shapelab/room/manifest.json is stale: run python -m shapelab.room.manifest"
    m = manifest.load()
    assert [x.id for x in m.lessons] == sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9]*.ipynb"))
    assert [x.id for x in m.labs] == sorted(p.stem for p in (ROOT / "solutions").glob("[0-9]*_lab.ipynb"))
    assert all(p.question and p.line.startswith("S.reveal(") for x in m.lessons for p in x.prompts)
    assert all(x.exercises and x.title.startswith("Lab ") for x in m.labs)


def test_manifest_refuses_what_it_cannot_key(tmp_path):
    """Two reveals on one line, a reveal with no prompt above it, an exercise named by a variable: each stops the
    build with the notebook, the cell and what to change."""
    import nbformat
    from shapelab.room import manifest

    def course(lesson_cells, lab_cells):
        for folder, name, cells in (("notebooks", "01_x.ipynb", lesson_cells), ("solutions", "01_x_lab.ipynb", lab_cells)):
            (tmp_path / folder).mkdir(exist_ok=True)
            nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 01 · x")] + [
                nbformat.v4.new_markdown_cell(c[3:]) if c.startswith("md:") else nbformat.v4.new_code_cell(c) for c in cells])
            nbformat.write(nb, tmp_path / folder / name)
        return tmp_path

    lab = ['checker = S.Checker("01_x")', 'checker.run("Exercise 1", f)']
    ask = "md:> **Predict first.** How many?"
    good = manifest.build(course([ask, "predicted = ...", "%time x = 1\nS.reveal(predicted, 2)"], lab))
    assert good["lessons"][0]["prompts"] == [{"line": "S.reveal(predicted, 2)", "kind": "Predict first",
                                             "question": "How many?", "name": "predicted", "concept": "", "phase": "pre"}]
    assert good["labs"][0] == {"id": "01_x_lab", "label": "01_x", "title": "01 · x", "exercises": ["Exercise 1"]}
    for lesson, lab_cells, message in [
            ([ask, "S.reveal(p, 2)", "S.reveal(p, 2)"], lab, "two reveals on the same line"),
            (["S.reveal(p, 2)"], lab, "has no '> **Predict first.** ...' prompt"),
            ([ask], ['checker = S.Checker("01_x")', "checker.run(NAME, f)"], "must be a string literal")]:
        with pytest.raises(manifest.ManifestError, match=re.escape(message)):
            manifest.build(course(lesson, lab_cells))


class Service:
    """The room service's app on a loopback port in a thread of its own, over ``db``; a request's
    ``Authorization: token NAME`` names its user (what the hub would answer for NAME's token)."""

    def __init__(self, db: str, roster: list[str], manifest=None):
        import asyncio
        import threading

        from tornado.httpserver import HTTPServer
        from tornado.netutil import bind_sockets

        from shapelab.room import service

        self.roster = roster
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.app = service.make_app(db, ["teach"], roster=_FakeRoster(roster), manifest=manifest)
            sockets = bind_sockets(0, "127.0.0.1")
            self.port = sockets[0].getsockname()[1]
            self.server = HTTPServer(self.app, max_body_size=64 * 1024)
            self.server.add_sockets(sockets)
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/services/room"

    def request(self, method: str, path: str, user: str | None, body=None, raw: bytes | None = None):
        import json
        import urllib.error
        import urllib.request

        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} | ({"Authorization": f"token {user}"} if user else {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, text, hdrs = r.status, r.read().decode(), r.headers
        except urllib.error.HTTPError as e:
            status, text, hdrs = e.code, e.read().decode(), e.headers
        try:
            return status, (json.loads(text) if text else None), hdrs
        except ValueError:
            return status, text, hdrs

    def post(self, kind: str, user: str, record=None, raw: bytes | None = None):
        return self.request("POST", f"/api/{kind}", user, record, raw)[:2]

    def room(self) -> dict:
        status, summary, _ = self.request("GET", "/api/room", "teach")
        assert status == 200, summary
        return summary

    def close(self):
        self.loop.call_soon_threadsafe(self.server.stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.app.settings["store"].engine.dispose()


class _FakeRoster:
    def __init__(self, names):
        self.names = names

    async def learners(self):
        return list(self.names), "the test's roster, and anyone with a record"


@pytest.fixture
def fake_hub(monkeypatch):
    """The hub's user lookup replaced by the token's text: ``token alice`` is alice."""
    from shapelab.room import service

    async def prepare(handler):
        auth = handler.request.headers.get("Authorization", "")
        handler._hub_auth_user_cache = {"name": auth[6:], "kind": "user"} if auth.startswith("token ") else None

    monkeypatch.setattr(service.RoomHandler, "prepare", prepare)


@pytest.fixture
def room(tmp_path, fake_hub):
    s = Service(f"sqlite:///{tmp_path / 'room.sqlite'}", ["alice", "bob", "carol", "mallory"])
    yield s
    s.close()


def _reveal(lesson=None, index=0, **changes) -> dict:
    """A reveal of the manifest's prompt ``index`` of ``lesson`` (the first lesson with prompts)."""
    m = _manifest()
    les = next(x for x in m.lessons if x.prompts and (lesson is None or x.id == lesson))
    record = {"id": uuid.uuid4().hex, "lesson": les.id, "prompt": les.prompts[index].line, "predicted": "3",
              "measured": "3", "agreed": True}
    return record | changes


def _check(lab_index=0, exercise=0, **changes) -> dict:
    lab = _manifest().labs[lab_index]
    return {"id": uuid.uuid4().hex, "lab": lab.label, "exercise": lab.exercises[exercise], "passed": True,
            "attempt": 1} | changes


def _stored(room) -> int:
    return sum(len(room.app.settings["store"].records(kind)) for kind in ("reveal", "check"))


def test_attack_records_outside_the_course_are_refused(room):
    """A learner makes up a lesson, a prompt, a lab, an exercise: each a 400 with a one-line reason, none stored."""
    made_up = {
        "a lesson the course lacks": ("reveal", _reveal() | {"lesson": "99_made_up"}),
        "a prompt the lesson lacks": ("reveal", _reveal(prompt='S.reveal(predicted, 7, "graphs")  # mine')),
        "a lab the course lacks": ("check", _check(lab="99_made_up_lab")),
        "an exercise the lab lacks": ("check", _check(exercise=0) | {"exercise": "Exercise 99: take over the page"}),
        "an exercise of another lab": ("check", _check(0) | {"exercise": _manifest().labs[1].exercises[0]}),
    }
    for what, (kind, record) in made_up.items():
        status, answer = room.post(kind, "mallory", record)
        assert status == 400, (what, status, answer)
        assert answer["error"] and "\n" not in answer["error"], what
    assert _stored(room) == 0
    assert room.post("reveal", "alice", _reveal())[0] == 201 and room.post("check", "alice", _check())[0] == 201


def test_attack_malformed_payloads_are_400_and_the_service_goes_on(room):
    """Deep nesting, NUL, lone surrogates, wrong types, oversized, not an object: 400, nothing stored, no 500."""
    import json

    good = _reveal()
    bad = {
        "nested 1,500 deep": b"[" * 1500 + b"]" * 1500,
        "an object nested 1,500 deep": b'{"id": ' * 1500 + b"1" + b"}" * 1500,
        "NUL in a value": json.dumps(good | {"predicted": "3\x00"}).encode(),
        "NUL in the prompt": json.dumps(good | {"prompt": good["prompt"] + "\x00"}).encode(),
        "a lone surrogate": json.dumps(good | {"predicted": "\ud800"}).encode(),
        "a number for a string": json.dumps(good | {"measured": 3}).encode(),
        "a list for a string": json.dumps(good | {"predicted": [3]}).encode(),
        "an int for a bool": json.dumps(good | {"agreed": 1}).encode(),
        "NaN": json.dumps(good | {"agreed": float("nan")}).encode(),
        "oversized": json.dumps(good | {"predicted": "x" * 200, "pad": "y" * 5000}).encode(),
        "60 KiB": b"[" + b"1," * 30_000 + b"1]",
        "not an object": b'"a reveal"',
        "null": b"null",
        "not UTF-8": b'{"id": "\xff"}',
    }
    for what, raw in bad.items():
        status, answer = room.post("reveal", "mallory", raw=raw)
        assert status == 400, (what, status, answer)
        assert isinstance(answer, dict) and answer["error"] and "\n" not in answer["error"], (what, answer)
    assert _stored(room) == 0
    assert room.post("reveal", "mallory", good)[0] == 201  # still running, still accepting


def test_attack_a_flood_is_limited_per_learner(room):
    """Records as fast as one learner can send: over the burst they are 429 with Retry-After; another learner is
    not limited; the burst holds more than two Run All of the biggest notebook."""
    statuses = []
    burst = room.app.settings["limit"].burst
    for _ in range(burst + 30):
        status, _answer, headers = room.request("POST", "/api/reveal", "mallory", _reveal())
        statuses.append(status)
        if status == 429:
            assert int(headers["Retry-After"]) >= 1
    assert statuses[:burst] == [201] * burst and statuses.count(429) >= 25  # the refill (1 a second) lets a few by
    assert statuses[:2 * _manifest().records_per_run()] == [201] * (2 * _manifest().records_per_run())
    assert room.post("reveal", "alice", _reveal())[0] == 201
    assert room.app.settings["limit"].burst >= 2 * _manifest().records_per_run()


def test_the_rate_limit_refills_at_its_rate():
    from shapelab.room.service import RateLimit

    limit = RateLimit(burst=3, per_minute=60)
    assert [limit.take("a", now=0.0) for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]  # the burst, then a second to wait
    assert limit.take("b", now=0.0) == 0.0  # each learner has a bucket of their own
    assert limit.take("a", now=0.5) == 0.5 and limit.take("a", now=1.0) == 0.0
    assert [limit.take("a", now=100.0) for _ in range(4)] == [0.0, 0.0, 0.0, 1.0]  # refilled to the burst, no more


def test_attack_csv_export_neutralises_formulas(room):
    import csv

    for value in ["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]:
        assert room.post("reveal", "mallory", _reveal(predicted=value, measured="3", agreed=False))[0] == 201
    status, text, _ = room.request("GET", "/export.csv", "teach")
    assert status == 200
    cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], cells
    assert "'=HYPERLINK(\"http://x\")" in cells and "'-2+3" in cells


def test_attack_the_instructor_removes_a_learners_records(tmp_path, fake_hub):
    """mallory cannot remove alice's records (403); the instructor removes mallory's, and a restarted
    service on the same store still has them removed."""
    db = f"sqlite:///{tmp_path / 'room.sqlite'}"
    room = Service(db, ["alice", "mallory"])
    try:
        room.post("reveal", "alice", _reveal())
        for _ in range(3):
            room.post("reveal", "mallory", _reveal(measured="7"))
        room.post("check", "mallory", _check())
        assert room.request("POST", "/api/remove/alice", "mallory")[0] == 403
        status, answer, _ = room.request("POST", "/api/remove/mallory", "teach")
        assert status == 200 and answer["removed"] == {"reveals": 3, "checks": 1, "inventory": 0}, answer
    finally:
        room.close()
    again = Service(db, ["alice", "mallory"])
    try:
        store_ = again.app.settings["store"]
        assert {r["user"] for r in store_.records("reveal") + store_.records("check")} == {"alice"}
        assert again.room()["removals"][0]["user"] == "mallory"
    finally:
        again.close()



def test_the_page_an_instructor_teaches_from(tmp_path, fake_hub, browser):
    """A simulated room of five on the roster (and mallory, who is not) on lesson 03, read in Chromium at
    1280 x 800: the framed prompt follows the room, by its question, with n of N, unanswered apart from not
    reached; a pinned prompt stays framed across a reload until "follow the room"; long values open in full;
    every lab's exercises are listed before anyone checks; right is judged by the instructor's own run, mallory's
    kernel shown measuring otherwise; the instructor removes mallory's records."""
    lesson = _manifest().lesson("03_recompile_limit")
    lab = _manifest().lab("03_recompile_limit")
    room = Service(f"sqlite:///{tmp_path / 'room.sqlite'}", ["alice", "bob", "carol", "dave", "erin"])
    long_value = "[" + ", ".join(str(i) for i in range(1, 40)) + "]"
    sends = [("alice", 0, "[1, 2, 3]"), ("bob", 0, "[1, 2, 2]"), ("carol", 0, "[1, 2, 3]"), ("dave", 0, long_value),
             ("alice", 1, "False"), ("bob", 1, "True"), ("alice", 2, None), ("bob", 2, "True"), ("carol", 2, "True"),
             ("mallory", 2, "False")]
    for user, index, predicted in sends:
        measured = "False" if user == "mallory" else ("True" if index == 2 else "[1, 2, 3]")
        assert room.post("reveal", user, _reveal(lesson.id, index, predicted=predicted, measured=measured,
                                                 agreed=None if predicted is None else predicted == measured))[0] == 201
    room.post("reveal", "teach", _reveal(lesson.id, 2, predicted=None, measured="True", agreed=None))  # the reference
    room.post("check", "alice", _check(2, 1) | {"lab": lab.label, "exercise": lab.exercises[1]})
    room.post("check", "bob", _check(2, 0) | {"lab": lab.label, "exercise": lab.exercises[0], "passed": False})
    context = browser.new_context(viewport={"width": 1280, "height": 800},
                                  extra_http_headers={"Authorization": "token teach"})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        page.goto(room.url + "/")
        framed = page.locator("#framed")
        framed.locator(".question").wait_for(timeout=10_000)
        q2 = lesson.prompts[2]
        assert framed.get_attribute("data-prompt") == q2.line  # three of five learners are there last
        assert framed.locator(".question").inner_text() == q2.question.replace("`", "")  # `code` shown as code
        assert "following the room" in framed.inner_text()
        counts = framed.locator(".counts").inner_text()
        assert counts == "3 of 6 answered · 1 left unanswered · 2 not reached", counts
        assert "measured: True (3 kernels), False (1 kernel) · the instructor's run: True · 2 right · 1 kernel " \
               "measured otherwise" in framed.locator(".measured").inner_text()
        assert framed.locator(".bar.right .label").inner_text() == "True"  # mallory's "as predicted" False is not
        assert "N = 6 learners: the test's roster, and anyone with a record" in page.inner_text("body")
        for label in (lab.label, _manifest().labs[0].label):  # lab 01: nobody checked, every exercise listed
            rows = page.locator(f'details.lab[data-lab="{label}"] tr[data-exercise]')
            exercises = _manifest().lab(label).exercises
            assert [rows.nth(i).get_attribute("data-exercise") for i in range(rows.count())] == list(exercises)
        assert page.locator(f'details.lab[data-lab="{lab.label}"] summary').inner_text().startswith(lab.title)
        row = page.locator(f'details.lab[data-lab="{lab.label}"] tr[data-exercise="{lab.exercises[1]}"] td')
        assert [row.nth(i).inner_text() for i in range(1, 4)] == ["1", "0", "5"]
        assert page.locator('#positions tr[data-user="dave"] td').nth(1).inner_text() == f"03 · prompt 1 of {len(lesson.prompts)}"
        assert page.locator('#positions tr[data-user="erin"] td').nth(1).inner_text() == "no prompt yet"
        page.screenshot(path=str(SCREENSHOTS / "room_page_units.png"))

        # the instructor frames the first prompt: it stays framed over a reload, until "follow the room"
        page.locator(f'details.lesson[data-lesson="{lesson.id}"] li').nth(0).locator("button.pin").click()
        assert framed.get_attribute("data-prompt") == lesson.prompts[0].line and "pinned" in framed.inner_text()
        value = framed.locator(".bar details.value")  # dave's long prediction: folded, in full on a click
        assert value.locator("summary").inner_text().endswith("…")
        value.locator("summary").click()
        assert value.locator("div").inner_text() == long_value and value.locator("div").is_visible()
        closed = page.locator(f'details.lab[data-lab="{_manifest().labs[0].label}"]')
        closed.locator("summary").click()  # opened by hand, it stays open over the page's refreshes
        page.evaluate("() => refresh(false)")  # the page re-rendered from the service
        assert closed.get_attribute("open") is not None
        page.reload()
        framed.locator(".question").wait_for(timeout=10_000)
        assert framed.get_attribute("data-prompt") == lesson.prompts[0].line
        framed.locator("button.follow").click()
        assert framed.get_attribute("data-prompt") == q2.line

        # mallory's records removed from the page
        page.locator('#positions tr[data-user="mallory"] button.remove').click()
        page.wait_for_function("() => !document.querySelector('#positions tr[data-user=\"mallory\"]')", timeout=10_000)
        assert "measured: True (3 kernels)" in framed.locator(".measured").inner_text()
        assert "False" not in framed.locator(".measured").inner_text()
        assert "teach removed mallory's 1 predictions and 0 checks" in page.locator("#removals").inner_text()
        assert errors == []
    finally:
        context.close()
        room.close()


def _course(tmp_path, asks: list[tuple]) -> "manifest.Manifest":
    """A course of one lesson, 01_x, in ``tmp_path``: per (label, question, concept, value, ideas) a prompt cell
    tagged concept:CONCEPT (with metadata wrong_answers = ideas) and its reveal ``S.reveal(predicted_I, VALUE)``;
    and a lab of one check."""
    import nbformat
    from shapelab.room import manifest

    cells = [nbformat.v4.new_markdown_cell("# 01 · x")]
    for i, (label, question, concept, value, ideas) in enumerate(asks):
        cells += [nbformat.v4.new_markdown_cell(f"> **{label}.** {question}", metadata={"tags": [f"concept:{concept}"]}
                                                | ({"wrong_answers": ideas} if ideas else {})),
                  nbformat.v4.new_code_cell(f"S.reveal(predicted_{i}, {value})")]
    for folder, name, nb_cells in (("notebooks", "01_x.ipynb", cells),
                                   ("solutions", "01_x_lab.ipynb", [nbformat.v4.new_code_cell('c = S.Checker("01_x")')])):
        (tmp_path / folder).mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(cells=nb_cells), tmp_path / folder / name)
    return manifest.Manifest(manifest.build(tmp_path))


# A simulated room of 30 on one lesson with two concepts (prompts 0-1 ask about "sizes", 2 is its post question;
# 3 asks about "marks", 4 is its post question). Per learner, per prompt: "R" right, a wrong answer's text, None
# left unanswered, "-" not sent; a tuple is a changed answer (sent in that order: the first answer counts; a blank
# run then an answer: "after seeing"). The instructor ran every prompt first: right is what their kernel measured.
VALUES = ["2", "3", "4", "5", "6"]  # what each prompt's kernels measure
CONCEPTS = {"sizes": ([0, 1], [2]), "marks": ([3], [4])}
IDEA = "expects the first graph to be dynamic already; the default specialises the first size"
GROUPS = [("r", 8, ["R", "R", "R", "R", "R"]),           # right throughout
          ("l", 6, ["1", "9", "R", "9", "R"]),           # wrong before, right after
          ("w", 4, ["1", "9", "9", "9", "9"]),           # wrong throughout (w4 forges its measurement on prompt 0)
          ("b", 3, [None, None, "R", None, "R"]),        # left every prompt blank
          ("c", 3, [(None, "R"), "R", "9", ("R", "9"), "R"]),  # a blank run then the answer; a changed answer
          ("late", 2, ["R", "R", "R", "R", "R"]),        # joined 15 minutes late
          ("p", 1, ["-", "-", "R", "-", "9"]),           # answered only the post questions
          ("q", 1, ["1", "-", "-", "-", "-"]),           # one answer, then quiet
          ("m", 2, ["R", "9", "R", "9", "9"])]           # mixed
T0 = time.mktime((2026, 3, 10, 12, 0, 0, 0, 0, -1))  # noon on the room's clock: one session, whatever its zone
WEEK = 7 * 24 * 3600


def _simulate(m, s, later: float = T0 + WEEK):
    """Store the room's answers with their times (the instructor's runs first); returns {user: answers per
    prompt} and the round-2 voters."""
    prompts = m.lessons[0].prompts
    table = {}
    for group, count, answers in GROUPS:
        for k in range(1, count + 1):
            table[f"{group}{k}"] = answers
    assert len(table) == 30

    def send(user, index, answer, at):
        predicted = None if answer is None else (VALUES[index] if answer == "R" else answer)
        measured = "7" if (user, index) == ("w4", 0) else VALUES[index]  # a forged kernel: "as predicted" with 7
        predicted = "7" if (user, index) == ("w4", 0) else predicted
        s.add("reveal", user, {"id": uuid.uuid4().hex, "lesson": "01_x", "prompt": prompts[index].line,
                               "predicted": predicted, "measured": measured,
                               "agreed": None if predicted is None else predicted == measured}, at=at)

    for index in range(len(VALUES)):
        send("teach", index, None, T0 - 60 + index)
    for i, (user, answers) in enumerate(table.items()):
        start = T0 + (15 * 60 if user.startswith("late") else 0)
        for index, answer in enumerate(answers):
            if index in (2, 4) and not user.startswith("late"):
                at = T0 + 20 * 60 + i + index  # the post questions, at the lesson's end
            else:
                at = start + 60 * index + i
            for n, one in enumerate(answer if isinstance(answer, tuple) else (answer,)):
                if one != "-":
                    send(user, index, one, at + n)
    s.open_round("01_x", prompts[3].line, by="teach", at=T0 + 10 * 60)  # a second vote on "marks"
    voters = [u for u in table if u[0] in "lw"]
    for i, user in enumerate(voters):
        send(user, 3, "R", T0 + 11 * 60 + i)
    for i in range(20):  # later (a week), after a rewrite: everyone wrong before, 15 of 20 right after on "sizes"
        send(f"x{i}", 0, "1", later + i)
        send(f"x{i}", 2, "R" if i < 15 else "9", later + 600 + i)
    return table, voters


def _expected(table: dict) -> dict:
    """The report's numbers from the simulated answers alone (not the store's code): per prompt, the first votes
    (answers before seeing), those after seeing, and the right ones; the wrong answers to prompt 0; who is stuck."""
    def first(a):
        return a[0] if isinstance(a, tuple) else a

    def after(a):  # a blank run, then an answer
        return isinstance(a, tuple) and a[0] is None and a[1] is not None

    right = {u: [first(a) == "R" and not (u == "w4" and i == 0) for i, a in enumerate(answers)]
             for u, answers in table.items()}
    prompts = [{"answered": sum(first(a[i]) not in (None, "-") for a in table.values()),
                "after_seeing": sum(after(a[i]) for a in table.values()),
                "right": sum(right[u][i] for u in table)} for i in range(len(VALUES))]
    wrong0 = Counter(first(a[0]) for u, a in table.items() if first(a[0]) not in (None, "-") and not right[u][0]
                     and u != "w4")
    wrong0["7"] = 1  # the forged kernel predicted 7: wrong by the instructor's run
    stuck = {u: [f"01 {c}" for c, (_, post) in CONCEPTS.items()
                 if any(first(table[u][i]) not in (None, "-") and not right[u][i] for i in post)] for u in table}
    return {"prompts": prompts, "wrong0": wrong0.most_common(3), "stuck": {u: c for u, c in stuck.items() if c}}


def _room_course(tmp_path):
    return _course(tmp_path, [("Predict first", "How many graphs?", "sizes", 2, {"1": IDEA}),
                              ("Predict first", "And with F + 2?", "sizes", 3, {}),
                              ("Post question", "A new case of sizes?", "sizes", 4, {}),
                              ("Predict first", "Under mark_dynamic?", "marks", 5, {}),
                              ("Post question", "A new case of marks?", "marks", 6, {})])


def test_a_simulated_room_of_30_gives_the_reports_numbers(tmp_path):
    """30 learners (right, wrong, blank, a blank run then an answer, changed, late, after only, quiet, a forged
    kernel), the instructor's own runs and a second vote, then a second session a week later: the page's and the
    report's votes per prompt, wrong predictions and stuck learners are the ones computed from the simulated
    answers; the second vote is its own column; each session is its own."""
    from shapelab.room import report

    m = _room_course(tmp_path)
    s = store.Store(f"sqlite:///{tmp_path / 'room.sqlite'}", ["teach"])
    table, voters = _simulate(m, s)
    want = _expected(table)
    # the rule tells itself apart from its misreadings: the last answer, or an answer after seeing, counted
    lasts = {u: [a[-1] if isinstance(a, tuple) else a for a in answers] for u, answers in table.items()}
    assert _expected(lasts)["prompts"] != want["prompts"]
    summary = report.sessions(m, s)
    first, second = summary.values()
    got = [{k: p[k] for k in ("answered", "after_seeing", "right")} for p in first["lessons"][0]["prompts"]]
    assert got == want["prompts"]
    assert first["lessons"][0]["prompts"][3]["second"]["right"] == len(voters)
    assert [p["reference"] for p in first["lessons"][0]["prompts"]] == VALUES  # the instructor's runs
    assert first["lessons"][0]["prompts"][0]["differ"] == 1  # the forged kernel, shown
    assert [p["right"] for p in second["lessons"][0]["prompts"][:3]] == [0, 0, 15]
    wrong = {p["line"]: w for _, p, w in first["wrong"]}
    assert wrong[m.lessons[0].prompts[0].line] == [[a, n, IDEA if a == "1" else ""] for a, n in want["wrong0"]]
    stuck = {x["user"]: x for x in first["stuck"]}
    assert {u: x["wrong_after"] for u, x in stuck.items() if x["wrong_after"]} == want["stuck"]
    assert [u for u, x in stuck.items() if x["idle_min"] is not None] == ["q1"]  # quiet since its first answer
    assert "teach" not in stuck and first["learners"] == 30

    # the live page: the latest session; on the first session's day, the second vote beside the first
    assert s.room(m, [], "")["session"] == list(summary)[1]
    s.engine.dispose()
    with sa.create_engine(f"sqlite:///{tmp_path / 'room.sqlite'}").begin() as conn:  # drop the later session
        conn.execute(store.reveals.delete().where(store.reveals.c.at > T0 + WEEK / 2))
    s = store.Store(f"sqlite:///{tmp_path / 'room.sqlite'}", ["teach"])
    page = s.room(m, list(table), "the roster", now=T0 + 25 * 60)
    assert [{k: p[k] for k in ("answered", "after_seeing", "right")} for p in page["lessons"][0]["prompts"]] == want["prompts"]
    marks = page["lessons"][0]["prompts"][3]
    assert marks["second"]["answered"] == len(voters) and marks["second"]["predictions"] == [[VALUES[3], len(voters), len(voters)]]
    assert marks["answered"] == want["prompts"][3]["answered"]  # round 1 as it was
    assert page["lessons"][0]["prompts"][2]["second"] is None
    quiet_since = T0 + list(table).index("q1")  # its one record
    assert {x["user"]: x["idle_min"] for x in page["stuck"] if x["idle_min"] is not None} == \
        {"q1": round((T0 + 25 * 60 - quiet_since) / 60)}
    s.engine.dispose()


def test_the_report_and_the_rounds_are_the_instructors_alone(tmp_path, fake_hub):
    """A learner's token reads its own records only: the report, the room, another's records and the second
    vote are 403; hostile round requests are 400 with nothing stored; the command writes the same report."""
    import json

    from shapelab.room import report

    m = _room_course(tmp_path)
    db = f"sqlite:///{tmp_path / 'room.sqlite'}"
    s = store.Store(db, ["teach"])
    table, _ = _simulate(m, s)
    s.engine.dispose()
    room = Service(db, list(table), manifest=m)
    try:
        for method, path in [("GET", "/report.html"), ("GET", "/report.csv"), ("GET", "/api/room"),
                             ("GET", "/api/records/l1"), ("POST", "/api/round")]:
            status, _, _ = room.request(method, path, "r1", {"lesson": "01_x", "prompt": m.lessons[0].prompts[0].line})
            assert status == 403, (method, path, status)
        status, mine, _ = room.request("GET", "/api/mine", "r1")
        assert status == 200 and {r["user"] for r in mine["reveals"]} == {"r1"} and len(mine["reveals"]) == 5
        line = m.lessons[0].prompts[0].line
        for what, raw in {"not JSON": b"{", "no prompt": b'{"lesson": "01_x"}', "a list": b"[1]",
                          "a number for the line": json.dumps({"lesson": "01_x", "prompt": 3}).encode(),
                          "a prompt the course lacks": json.dumps({"lesson": "01_x", "prompt": line + " "}).encode(),
                          "NUL": json.dumps({"lesson": "01_x\x00", "prompt": line}).encode()}.items():
            status, answer, _ = room.request("POST", "/api/round", "teach", raw=raw)
            assert status == 400 and "\n" not in answer["error"], (what, status, answer)
        assert room.app.settings["store"].rounds(store.learning.session_of(time.time())) == set()
        assert room.request("POST", "/api/round", "teach", {"lesson": "01_x", "prompt": line})[0] == 200
        assert room.request("POST", "/api/round", "teach", {"lesson": "01_x", "prompt": line})[0] == 409
        status, text, headers = room.request("GET", "/report.csv", "teach")
        assert status == 200 and headers["Content-Type"].startswith("text/csv")
    finally:
        room.close()
    (tmp_path / "manifest.json").write_text(json.dumps(m.data))
    with redirect_stdout(io.StringIO()):
        assert report.main(["--db", db, "--out", str(tmp_path / "out"), "--manifest", str(tmp_path / "manifest.json")]) == 0
    assert (tmp_path / "out" / "report.csv").read_text() == text.replace("\r\n", "\n")
    written = (tmp_path / "out" / "report.html").read_text()
    assert "<svg id=bars" in written and "<svg id=across" in written
    assert not re.findall(r"(?:src|href)\s*=|<script|url\(|@import", written, re.I)  # nothing fetched, nothing run


def test_the_page_and_the_report_read_in_chromium(tmp_path, fake_hub, browser):
    """The room of 30 a week ago and a room of 20 today, read at 1280 x 800: the page shows today's session
    (each prompt's first vote right by the instructor's run; who is stuck where; a prompt's wrong answers with
    the lesson's idea), opens a second vote on a prompt and shows both rounds side by side; the report shows the
    latest session's first vote against the second, as computed from the simulated answers."""
    m = _room_course(tmp_path)
    db = f"sqlite:///{tmp_path / 'room.sqlite'}"
    now = time.time()
    midnight = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1))
    s = store.Store(db, ["teach"])
    _simulate(m, s, later=max(midnight + 1, now - 700))  # today's 20, all of it before now
    s.engine.dispose()
    room = Service(db, [f"x{i}" for i in range(20)], manifest=m)
    context = browser.new_context(viewport={"width": 1280, "height": 800},
                                  extra_http_headers={"Authorization": "token teach"})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(room.url + "/")
        lessons = page.locator('details.lesson[data-lesson="01_x"] li')
        lessons.nth(2).locator(".votes").wait_for(timeout=10_000)
        assert page.locator("#session").inner_text() == time.strftime("%Y-%m-%d", time.localtime(now))
        assert [(lessons.nth(i).locator(".n").inner_text(), lessons.nth(i).locator(".votes").inner_text())
                for i in (0, 2)] == [("20/20", "0✓"), ("20/20", "15✓")]  # right by the instructor's run a week ago
        assert [page.locator("#stuck tbody tr").nth(i).get_attribute("data-user") for i in range(5)] == \
            [f"x{i}" for i in range(15, 20)]
        lessons.nth(0).locator("button.pin").click()
        wrong = page.locator("#framed .wrong li")
        assert wrong.count() == 1 and wrong.nth(0).inner_text() == f"1 (20) · {IDEA}"
        lessons.nth(3).locator("button.pin").click()
        page.locator("#framed button.second-vote").click()
        page.locator("#framed .rounds").wait_for(timeout=10_000)
        for i in range(5):
            assert room.post("reveal", f"x{i}", {"id": uuid.uuid4().hex, "lesson": "01_x", "prompt": m.lessons[0].prompts[3].line,
                                                 "predicted": "5", "measured": "5", "agreed": True})[0] == 201
        page.evaluate("() => refresh(false)")
        page.wait_for_function("() => document.querySelectorAll('#framed .rounds .counts').length === 2 && "
                               "document.querySelectorAll('#framed .rounds .counts')[1].textContent.startsWith('5')")
        counts = page.locator("#framed .rounds .counts")
        assert counts.nth(0).inner_text() == "0 of 20 answered · 0 left unanswered · 20 not reached"
        assert counts.nth(1).inner_text() == "5 of 20 answered · 0 left unanswered · 15 not reached"
        page.screenshot(path=str(SCREENSHOTS / "room_page_votes.png"), full_page=True)

        page.goto(room.url + "/report.html")
        row = page.locator(f"#votes tr[data-prompt='{m.lessons[0].prompts[3].line}'] td")
        assert [row.nth(i).inner_text() for i in (2, 3, 4, 5)] == ["0 of 0", "5 of 5", "0", "the instructor’s run: 5"]
        row = page.locator(f"#votes tr[data-prompt='{m.lessons[0].prompts[2].line}'] td")
        assert [row.nth(i).inner_text() for i in (2, 3)] == ["15 of 20", "–"]
        page.screenshot(path=str(SCREENSHOTS / "room_report.png"), full_page=True)
        assert errors == []
    finally:
        context.close()
        room.close()


@pytest.mark.parametrize("before, after", [(0.3, 0.65), (0.5, 0.8), (0.3, 0.5)])
def test_the_noise_of_g_agrees_with_binomial_arithmetic(before, after):
    """The simulated spread of g for a room of 40 (INSTRUCTOR.md's table) against the delta method on two
    binomial shares: g = (A - B) / (1 - B), var A = a(1 - a)/(40 post), var B = b(1 - b)/(40 pre)."""
    from shapelab.room import noise

    s = noise.spread(40, before, after, pre=2, post=1)
    var_after, var_before = after * (1 - after) / 40, before * (1 - before) / 80
    sd = (var_after / (1 - before) ** 2 + var_before * (after - 1) ** 2 / (1 - before) ** 4) ** 0.5
    g = (after - before) / (1 - before)
    assert s["g"] == pytest.approx(g) and s["median"] == pytest.approx(g, abs=0.02)
    assert (s["p5"], s["p95"]) == (pytest.approx(g - 1.645 * sd, abs=0.03), pytest.approx(g + 1.645 * sd, abs=0.03))


def test_manifest_reads_the_idea_each_wrong_answer_reveals(tmp_path):
    """A prompt cell's metadata wrong_answers is kept with its prompt (absent where a cell has none, so the
    course's manifest.json stays as it was); anything but short text to short text stops the build."""
    from shapelab.room import manifest

    m = _course(tmp_path / "good", [("Predict first", "How many?", "sizes", 2, {"1": IDEA}),
                                    ("Post question", "Again?", "sizes", 3, {})])
    assert m.data["lessons"][0]["prompts"][0]["ideas"] == {"1": IDEA} and m.lessons[0].prompts[0].ideas == (("1", IDEA),)
    assert "ideas" not in m.data["lessons"][0]["prompts"][1] and m.lessons[0].prompts[1].ideas == ()
    for i, bad in enumerate([{"1": 3}, {"": "an idea"}, {"1": ""}, {"1": "x" * 301}, ["1"]]):
        with pytest.raises(manifest.ManifestError, match="wrong_answers must map answers"):
            _course(tmp_path / str(i), [("Predict first", "How many?", "sizes", 2, bad)])


def test_a_kernel_is_told_when_its_answer_counts_in_the_second_vote(tmp_path, fake_hub, monkeypatch):
    """The client against the real service: a reveal before the instructor opens the second vote prints nothing
    of the room; the same cell re-run after it prints one line and is stored as round 2."""
    m = _room_course(tmp_path)
    room = Service(f"sqlite:///{tmp_path / 'room.sqlite'}", ["x1"], manifest=m)
    monkeypatch.setenv(client.URL_ENV, room.url)
    monkeypatch.setenv(client.TOKEN_ENV, "x1")  # the fake hub names the learner by the token's text
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/x1/notebooks/01_x.ipynb")
    line = m.lessons[0].prompts[3].line  # S.reveal(predicted_3, 5)
    record = {"lesson": "01_x", "prompt": line, "predicted": "4", "measured": "5", "agreed": False}
    try:
        for expected in ("", "(room: this answer counts in the second vote the instructor opened)\n"):
            out = io.StringIO()
            with redirect_stdout(out):
                assert client._send("reveal", record) is True
            assert out.getvalue() == expected
            if not expected:
                assert room.request("POST", "/api/round", "teach", {"lesson": "01_x", "prompt": line})[0] == 200
        assert [r["round"] for r in room.app.settings["store"].records("reveal", "x1")] == [1, 2]
    finally:
        room.close()


def test_the_guides_noise_table_is_what_the_script_prints():
    """INSTRUCTOR.md's table of g's spread (section 5) holds the figures python -m shapelab.room.noise gives."""
    from shapelab.room import noise

    guide = (ROOT / "INSTRUCTOR.md").read_text().split("## 5. Reading the gain")[1]
    rows = re.findall(r"^\| (\d+) \| (\d+) % \| (\d+) % \| ([\d.]+) \| (-?[\d.]+) and (-?[\d.]+) \| (\d+) % \|$", guide, re.M)
    assert len(rows) == 6
    for n, before, after, g, low, high, flagged in rows:
        s = noise.spread(int(n), int(before) / 100, int(after) / 100)
        assert (f"{s['g']:.2f}", f"{s['p5']:.2f}", f"{s['p95']:.2f}", f"{s['flagged']:.0%}") == (g, low, high, flagged + "%")
    between = re.search(r"differ by up to ±([\d.]+) \(n = 20\) or\s+±([\d.]+) \(n = 40\)", guide)
    for n, bound in zip((20, 40), between.groups()):  # two sessions of one section: the 90 % range of the change
        low, high = noise.two_sessions(n)
        assert max(-low, high) == pytest.approx(float(bound), abs=0.01), n
