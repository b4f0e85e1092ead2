"""The room's parts without a hub: the kernel's client outside a room, payload validation, the store and its
migrations on SQLite and on a real PostgreSQL server of the test's own, the hub's configuration, the command,
and the Kubernetes values. The room on a real hub is tests/test_room.py."""
from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

import shapelab as S
from shapelab.room import client, store
from shapelab.room.hub import LANDING, Room, configure
from shapelab.room.service import FIELDS, MAX_BODY, validate

ROOT = Path(__file__).resolve().parents[1]


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


def _good(kind: str) -> dict:
    return {"id": uuid.uuid4().hex, "lesson": "l", "prompt": "p", "predicted": "1", "measured": "1", "agreed": True} \
        if kind == "reveal" else {"id": uuid.uuid4().hex, "lab": "l", "exercise": "e", "passed": True, "attempt": 1}


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_validate_accepts_records_and_rejects_everything_else(kind):
    import json

    good = _good(kind)
    assert validate(kind, json.dumps(good).encode()) == good
    bad = [b"", b"nul", b"\xff\xfe", b"[]", b'"text"', json.dumps({**good, "user": "bob"}).encode(),
           json.dumps({k: v for k, v in good.items() if k != "id"}).encode(),
           json.dumps({**good, "id": "X" * 32}).encode(), b"{" + b" " * MAX_BODY + b"}"]
    for field, typ in FIELDS[kind].items():
        wrong = {str: 1, bool: 1, int: True}[typ]  # bool is not int here, nor int bool
        bad.append(json.dumps({**good, field: wrong}).encode())
        if typ is str and field != "id":
            bad += [json.dumps({**good, field: ""}).encode(), json.dumps({**good, field: "x" * 201}).encode()]
    for body in bad:
        with pytest.raises(ValueError):
            validate(kind, body)


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
    assert [r["id"] for r in s.records("reveal")] == [record["id"]]
    assert store.migrate(s.engine) == store.VERSION  # a second start changes nothing
    with s.engine.begin() as conn:
        conn.execute(store.schema_version.update().values(version=store.VERSION + 1))
    with pytest.raises(store.NewerSchema):
        store.Store(url)
    s.engine.dispose()


def test_store_counts_the_room(db_url):
    s = store.Store(db_url)
    for user, predicted in [("alice", "3"), ("bob", "2"), ("carol", "3"), ("alice", "2")]:  # alice changes her mind
        assert s.add("reveal", user, {"id": uuid.uuid4().hex, "lesson": "00", "prompt": "S.reveal(p, m)",
                                      "predicted": predicted, "measured": "3", "agreed": predicted == "3"})
    again = {"id": uuid.uuid4().hex, "lab": "01_lab", "exercise": "e", "passed": False, "attempt": 1}
    assert s.add("check", "alice", again) and not s.add("check", "alice", again)  # the same id is stored once
    s.add("check", "bob", {**again, "id": uuid.uuid4().hex, "passed": True})
    room = s.room(["alice", "bob", "carol", "dave"])
    (prompt,) = room["prompts"]
    assert prompt["predictions"] == {"2": 2, "3": 1} and prompt["measured"] == "3" and prompt["answered"] == 3
    assert room["exercises"] == [{"lab": "01_lab", "exercise": "e", "passed": 1, "tried": 1, "not_started": 2}]
    lines = s.export_csv().splitlines()
    assert lines[0].startswith("kind,user,time") and len(lines) == 1 + 4 + 2
    s.engine.dispose()
    assert len(store.Store(db_url).records("reveal")) == 4  # a restarted service reads what was acknowledged


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


def test_hub_configuration():
    from traitlets.config import Config

    c = Config()
    room = Room(course=str(ROOT), state="/srv/room", homes="/home", instructor="teach", learners=["a", "b"],
                learner_python="/srv/room-python/bin/python")
    configure(c, room)
    assert c.JupyterHub.authenticator_class == "firstuseauthenticator.FirstUseAuthenticator"
    assert c.Authenticator.admin_users == {"teach"} and c.Authenticator.allowed_users == {"a", "b", "teach"}
    assert c.FirstUseAuthenticator.create_users is False  # a roster: nobody else signs up
    assert c.Spawner.default_url == LANDING and (ROOT / LANDING.removeprefix("/lab/tree/")).is_file()
    assert c.Spawner.cmd == ["/srv/room-python/bin/python", "-m", "jupyterhub.singleuser"]
    assert "access:services!service=room" in c.Spawner.server_token_scopes
    services = {s["name"]: s for s in c.JupyterHub.services}
    assert services["room"]["command"][-1] == "sqlite:////srv/room/room.sqlite"
    assert services["room"]["environment"] == {"SHAPELAB_ROOM_INSTRUCTORS": "teach"}
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
