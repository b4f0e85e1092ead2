"""The room on a real JupyterHub: its proxy, first-use logins in Chromium, learners as OS users,
predictions and lab checks sent from real kernels, the instructor's page, every refusal, and load.

One hub serves every test here (module fixture) on 127.0.0.1: two learners and an instructor, plus
a "tester" service whose token plays the admin's part in setting up (spawning servers, making
tokens). Every process the hub started is stopped by its PID at the end, and the OS users it made
are removed. Needs root (useradd), Debian's chromium, and configurable-http-proxy (.ci/run installs
it); under CI=true a missing piece fails the test, elsewhere it skips.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from chromium import browser  # noqa: F401 (the fixture the logins are driven with)
from shapelab.room import accounts, loadtest
from shapelab.room.client import TIMEOUT
from shapelab.room.hub import LANDING, Room, write_config

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
LEARNERS = ["roomtest-alice", "roomtest-bob"]
INSTRUCTOR = "roomtest-teach"
ADMIN_TOKEN = uuid.uuid4().hex
LOAD_SECONDS = float(os.environ.get("SHAPELAB_ROOM_LOAD_SECONDS", "5"))  # 60 by hand: see INSTRUCTOR.md
TESTER = f"""
c.JupyterHub.services.append({{"name": "tester", "api_token": {ADMIN_TOKEN!r}}})
c.JupyterHub.load_roles.append({{"name": "tester", "services": ["tester"],
    "scopes": ["admin:users", "admin:servers", "tokens", "list:users"]}})
"""


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the room makes OS users: run as root"
    if not shutil.which("configurable-http-proxy"):
        return "configurable-http-proxy is missing (npm install -g configurable-http-proxy)"
    if not shutil.which("useradd"):
        return "useradd is missing"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method: str, url: str, token: str | None = None, body=None, raw: bytes | None = None):
    """(status, parsed JSON or text) for one HTTP request; errors are answers too."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"token {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def _answers(url: str) -> bool:
    try:
        return request("GET", url)[0] == 200
    except OSError:
        return False


class Kernel:
    """A kernel in a learner's single-user server, driven over its websocket as JupyterLab does."""

    def __init__(self, hub: "Hub", user: str):
        import websocket

        self.user = user
        self.token = hub.token(user, [f"access:servers!user={user}"])
        status, session = request("POST", f"{hub.url}/user/{user}/api/sessions", self.token, {
            "path": "notebooks/00_orientation.ipynb", "name": "00_orientation.ipynb", "type": "notebook",
            "kernel": {"name": "python3"}})
        assert status == 201, (status, session)
        self.id = session["kernel"]["id"]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{hub.room.port}/user/{user}/api/kernels/{self.id}/channels",
            header=[f"Authorization: token {self.token}"], timeout=60)

    def run(self, code: str) -> str:
        """Execute ``code``; return what it printed (and any traceback)."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": self.user, "session": "test",
                       "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        out = []
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                out.append("\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)


class Hub:
    def __init__(self, room: Room, proc: subprocess.Popen, log: Path):
        self.room, self.proc, self.log = room, proc, log
        self.url = f"http://127.0.0.1:{room.port}"
        self.service = f"http://127.0.0.1:{room.service_port}/services/room"  # where kernels send
        self.kernels: dict[str, Kernel] = {}

    def api(self, method: str, path: str, body=None):
        return request(method, f"{self.url}/hub/api{path}", ADMIN_TOKEN, body)

    def token(self, user: str, scopes: list[str]) -> str:
        status, model = self.api("POST", f"/users/{user}/tokens", {"scopes": scopes, "note": "room test"})
        assert status == 201, (status, model)
        return model["token"]

    def wait_ready(self, user: str, timeout: float = 90) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, model = self.api("GET", f"/users/{user}")
            if status == 200 and model["servers"].get("", {}).get("ready"):
                return
            time.sleep(0.3)
        raise AssertionError(f"{user}'s server did not start:\n{self.tail()}")

    def kernel(self, user: str) -> Kernel:
        if user not in self.kernels:
            status, model = self.api("GET", f"/users/{user}")
            if not model["servers"].get("", {}).get("ready"):
                self.api("POST", f"/users/{user}/server")
                self.wait_ready(user)
            self.kernels[user] = Kernel(self, user)
        return self.kernels[user]

    def service_pid(self) -> int:
        import psutil

        for p in psutil.Process(self.proc.pid).children():
            try:
                if p.status() != psutil.STATUS_ZOMBIE and "shapelab.room.service" in " ".join(p.cmdline()):
                    return p.pid
            except psutil.Error:  # gone since we listed it
                pass
        raise AssertionError("the room service is not running")

    def footprint(self) -> dict[str, float]:
        """Resident memory (MiB) of each learner's processes under the hub, by user and program."""
        import psutil

        out = {}
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if p.username() in LEARNERS:
                    what = "kernel" if "ipykernel" in " ".join(p.cmdline()) else "server"
                    out[f"{p.username()} {what}"] = p.memory_info().rss / 2**20
            except psutil.Error:
                pass
        return dict(sorted(out.items()))

    def rows(self, sql: str, *args):
        with sqlite3.connect(Path(self.room.state) / "room.sqlite") as db:
            return db.execute(sql, args).fetchall()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def hub():
    reason = _missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the room test is mandatory in CI: {reason}")
        pytest.skip(reason)
    import psutil

    for name in [*LEARNERS, INSTRUCTOR]:  # left by a run that was killed before its teardown
        accounts.remove_user(name)
    base = Path(tempfile.mkdtemp(prefix="shapelab-room-"))
    base.chmod(0o755)  # learners' homes and their Python live under it
    room = Room(course=str(ROOT), state=str(base / "state"), homes=str(base / "homes"), instructor=INSTRUCTOR,
                learners=list(LEARNERS), ip="127.0.0.1", port=_free_port(), proxy_api_port=_free_port(),
                hub_port=_free_port(), service_port=_free_port(), python=sys.executable, threads=1)
    room.learner_python = accounts.learner_python(sys.executable, base / "python")
    config = write_config(room, TESTER)
    log = base / "hub.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "SHAPELAB_ROOM"))}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=room.state, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(room, proc, log)
    pids: set[int] = set()
    try:
        deadline = time.time() + 60
        while not _answers(f"{hub.url}/hub/api/"):
            if proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"the hub did not start:\n{hub.tail()}")
            time.sleep(0.3)
        yield hub
    finally:
        for k in hub.kernels.values():
            k.ws.close()
        try:  # every process of the room, by PID: the hub, its proxy, services, servers and kernels
            pids = {proc.pid} | {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        pid_file = Path(room.state) / "proxy.pid"
        if pid_file.exists():
            pids.add(int(pid_file.read_text().strip()))
        # the hub first, so that it restarts nothing; a graceful shutdown waits on its services for long seconds
        for pid in sorted(pids, key=lambda pid: pid != proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)
        for name in [*LEARNERS, INSTRUCTOR]:
            accounts.remove_user(name)
        shutil.rmtree(base, ignore_errors=True)


def _login(browser, hub: Hub, user: str, next_url: str = ""):
    """Log in through the hub's own login page (the first login sets the password); return the page, in the
    1280 x 800 window the course is read in."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login" + (f"?next={next_url}" if next_url else ""))
    page.fill("#username_input", user)
    page.fill("#password_input", f"{user}-password")
    page.click("#login_submit")
    return page


PREDICT = """
import shapelab as S
predicted, measured = {predicted}, 3
S.reveal(predicted, measured, "graphs")
checker = S.Checker("01_symbolic_guards_lab")
for ok in {attempts}:
    checker.check("mark_dynamic", ok, "checked")
"""


def test_learners_predictions_reach_the_instructors_page(hub, browser):
    """Two learners log in, land in JupyterLab on lesson 00 as their own OS users, predict and check in
    real kernels; the instructor, logged in through the same page, sees both on the room's page."""
    pages = {user: _login(browser, hub, user) for user in LEARNERS}  # both servers start at once
    for user, page in pages.items():
        page.wait_for_url(f"**/user/{user}{LANDING}*", wait_until="commit", timeout=90_000)
        page.context.close()
        hub.wait_ready(user)
        home = Path(hub.room.homes) / user
        assert home.stat().st_uid == accounts.pwd.getpwnam(user).pw_uid
        assert (home / "labs").is_dir() and (home / "labs").stat().st_uid == home.stat().st_uid
        lesson = (home / "notebooks" / "00_orientation.ipynb").stat()
        assert lesson.st_uid == 0 and lesson.st_mode & 0o222 == 0  # the lessons are read-only, root's
    outputs = {}
    for user, predicted, attempts in [(LEARNERS[0], 3, [False, True]), (LEARNERS[1], 2, [False])]:
        kernel = hub.kernel(user)
        outputs[user] = kernel.run(PREDICT.format(predicted=predicted, attempts=attempts))
        assert "You predicted" in outputs[user] and "(room:" not in outputs[user], outputs[user]
        assert kernel.run("import os; print(os.getuid())").strip() == str(accounts.pwd.getpwnam(user).pw_uid)

    print("\nroom footprint, each learner's server and its kernel (shapelab imported, no torch): "
          + "; ".join(f"{name} {mib:.0f} MiB" for name, mib in hub.footprint().items()))

    page = _login(browser, hub, INSTRUCTOR, "/services/room/")
    page.wait_for_url("**/services/room/", timeout=60_000)
    prompt = page.locator('.prompt[data-prompt=\'S.reveal(predicted, measured, "graphs")\']')
    try:  # the page refreshes itself every 2 s
        prompt.filter(has_text="2 predicted").wait_for(timeout=20_000)
    except Exception as e:
        raise AssertionError(f"the room's page lacks the prompt: {e}\n{page.inner_text('body')}\n{hub.tail()}") from None
    bars = {prompt.locator(".bar").nth(i).locator(".label").inner_text():
            prompt.locator(".bar").nth(i).locator(".count").inner_text() for i in range(prompt.locator(".bar").count())}
    assert bars == {"3": "1", "2": "1"}, bars
    assert prompt.locator(".bar.right .label").inner_text() == "3"  # the measured answer is marked
    assert "00_orientation" in prompt.inner_text()
    row = page.locator('#exercises tr[data-exercise="mark_dynamic"] td')
    assert [row.nth(i).inner_text() for i in range(5)] == ["01_symbolic_guards_lab", "mark_dynamic", "1", "1", "0"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "room_instructor.png"))  # to look at, as the instructor sees it
    with page.expect_download() as download:
        page.click("#export")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    reveals = {r["user"]: r["predicted"] for r in rows if r["kind"] == "reveal"}
    assert reveals == {LEARNERS[0]: "3", LEARNERS[1]: "2"}
    assert sorted((r["user"], r["attempt"], r["passed"]) for r in rows if r["kind"] == "check") == [
        (LEARNERS[0], "1", "False"), (LEARNERS[0], "2", "True"), (LEARNERS[1], "1", "False")]
    page.context.close()


def _record(**changes) -> dict:
    record = {"id": uuid.uuid4().hex, "lesson": "00_orientation", "prompt": "S.reveal(p, m)", "predicted": "1",
              "measured": "1", "agreed": True}
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


def test_room_refuses_what_it_must(hub):
    """Item 4: 403 on another's records and the instructor page, no writing as someone else, 400 and
    nothing stored for bad payloads, nothing acknowledged lost on restart, no hang when the room is slow."""
    alice, bob = LEARNERS
    scope = "access:services!service=room"
    alice_token, teach_token = hub.token(alice, [scope, f"access:servers!user={alice}"]), hub.token(INSTRUCTOR, [scope])
    svc = hub.service
    for path in ["/", "/api/room", "/export.csv", f"/api/records/{bob}"]:
        assert request("GET", svc + path, alice_token)[0] == 403, path
        assert request("GET", svc + path, teach_token)[0] == 200, path
    assert request("GET", f"{svc}/api/records/{alice}", alice_token)[0] == 200  # her own record
    status, mine = request("GET", f"{svc}/api/mine", alice_token)
    assert status == 200 and mine["user"] == alice and {r["user"] for r in mine["reveals"] + mine["checks"]} <= {alice}
    assert request("GET", f"{svc}/api/room")[0] == 403  # no token at all
    assert request("POST", f"{svc}/api/reveal", "not-a-token", _record())[0] == 403
    # another learner's server, through the proxy
    bob_server = hub.kernel(bob)  # noqa: F841 (bob's server is running)
    assert request("GET", f"{hub.url}/user/{bob}/api/status", alice_token)[0] == 403

    count = lambda: hub.rows("SELECT COUNT(*) FROM reveals")[0][0] + hub.rows("SELECT COUNT(*) FROM checks")[0][0]  # noqa: E731
    before = count()
    bad = {
        "as someone else": _record(user=bob),
        "not JSON": b"{not json",
        "a list": b"[1, 2]",
        "a missing field": _record(agreed=None),
        "a string for a bool": _record(agreed="yes"),
        "a number for a string": _record(predicted=3),
        "an empty prompt": _record(prompt=""),
        "a long prompt": _record(prompt="x" * 201),
        "a bad id": _record(id="../../etc"),
        "an oversized payload": _record(predicted="x" * 200, extra="y" * 5000),
    }
    for what, payload in bad.items():
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        status, answer = request("POST", f"{svc}/api/reveal", alice_token, raw=raw)
        assert status == 400, (what, status, answer)
        assert answer["error"], what
    assert request("POST", f"{svc}/api/check", alice_token, {"id": uuid.uuid4().hex, "lab": "l", "exercise": "e",
                                                               "passed": True, "attempt": 0})[0] == 400
    assert count() == before, "a refused payload was stored"

    # a record is stored as the token's owner, once, however often it is sent
    record = _record()
    assert request("POST", f"{svc}/api/reveal", alice_token, record) == (201, {"stored": True, "id": record["id"]})
    assert request("POST", f"{svc}/api/reveal", alice_token, record)[1]["stored"] is False
    assert hub.rows("SELECT user FROM reveals WHERE id = ?", record["id"]) == [(alice,)]

    # a restart loses nothing acknowledged: kill the service hard; the hub restarts it
    acknowledged = hub.rows("SELECT id FROM reveals UNION SELECT id FROM checks")
    old = hub.service_pid()
    os.kill(old, signal.SIGKILL)
    deadline = time.time() + 60
    while True:
        try:
            if hub.service_pid() != old and request("GET", f"{svc}/api/records/{alice}", alice_token)[0] == 200:
                break
        except (AssertionError, OSError):
            pass
        assert time.time() < deadline, f"the room service did not come back:\n{hub.tail()}"
        time.sleep(0.3)
    status, mine = request("GET", f"{svc}/api/records/{alice}", alice_token)
    assert record["id"] in {r["id"] for r in mine["reveals"]}
    assert set(hub.rows("SELECT id FROM reveals UNION SELECT id FROM checks")) == set(acknowledged)

    # a kernel never hangs on a slow or absent room: one line, and the lesson goes on
    kernel = hub.kernel(alice)
    out = kernel.run(f"""
import os, socket, time
import shapelab as S
slow = socket.socket(); slow.bind(("127.0.0.1", 0)); slow.listen()   # accepts, never answers
closed = socket.socket(); closed.bind(("127.0.0.1", 0)); port = closed.getsockname()[1]; closed.close()
for url in [f"http://127.0.0.1:{{slow.getsockname()[1]}}/services/room", f"http://127.0.0.1:{{port}}/services/room"]:
    os.environ["SHAPELAB_ROOM_URL"] = url
    start = time.perf_counter()
    S.reveal(2, 2, "graphs")
    S.Checker("lab").check("ex", True, "ok")
    print("took", round(time.perf_counter() - start, 3))
os.environ["SHAPELAB_ROOM_URL"] = {svc!r}
""")
    lines = out.splitlines()
    assert sum("You predicted 2" in line for line in lines) == 2, out
    assert sum(line.startswith("(room: this prediction was not recorded") for line in lines) == 2, out
    assert sum(line.startswith("(room: this check result was not recorded") for line in lines) == 2, out
    took = [float(line.split()[1]) for line in lines if line.startswith("took")]
    assert took[0] < 2 * TIMEOUT + 1.0 and took[1] < 1.0, took  # two sends at most TIMEOUT each; refused at once
    assert "Traceback" not in out


def test_room_under_load(hub):
    """Item 5, bounded: 40 simulated learners, one prediction a second each, every tenth sent twice:
    every acknowledged record stored exactly once, nothing refused, p95 latency under the kernel's timeout."""
    names = [f"roomload-{i:02d}" for i in range(40)]
    assert hub.api("POST", "/users", {"usernames": names})[0] == 201
    tokens = {name: hub.token(name, ["access:services!service=room"]) for name in names}
    load = loadtest.run(hub.service, tokens, seconds=LOAD_SECONDS)
    stored = hub.rows("SELECT id, user, COUNT(*) FROM reveals WHERE lesson = 'loadtest' GROUP BY id")
    print(f"\nroom load: {len(names)} learners x {LOAD_SECONDS:g} s: {load.sent} sent (+{load.resent} resent), "
          f"{len(load.acknowledged)} acknowledged, {len(stored)} stored, {len(load.failed)} failed; "
          f"p95 {1000 * load.p95():.1f} ms ({1000 * load.p95(steady=True):.1f} ms after each learner's first), "
          f"median {1000 * sorted(load.latencies)[len(load.latencies) // 2]:.1f} ms, max {1000 * max(load.latencies):.1f} ms")
    assert load.failed == []
    assert load.sent == len(names) * int(LOAD_SECONDS) and load.resent > 0
    assert {i: u for i, u, _ in stored} == load.acknowledged  # none lost, each as its sender
    assert all(n == 1 for *_, n in stored)  # none duplicated, the resent ones included
    assert load.p95() < TIMEOUT
