"""The room on a real JupyterHub, started with its own command as an instructor starts it: its proxy,
logins with the room's codes in Chromium, JupyterLab running a lesson's cells, learners as OS users who
can read nothing but their own, predictions and lab checks reaching the instructor's page, a learner's
attacks on the instructor's browser, every refusal, load, and Ctrl-C stopping everything.

One room serves every test here (module fixture): ``python -m shapelab.tools.room`` on 127.0.0.1 with
ports of its own, three learners on the roster (one of them the attacker of issue 37) and an instructor,
each logging in with the code the room issued, plus a "tester" service (``--extra-config``) whose token
plays the admin's part in setting up (spawning servers, making tokens). Browsers reach the hub at
``localhost`` and each learner's server at ``NAME.localhost`` (Chromium resolves them without DNS;
urllib here sends to 127.0.0.1 with the name in the Host header). The course's folder is
closed to other users for the module (``chmod o-rwx``, as ``--check`` asks) and reopened after. Every
process the room started is stopped by its PID at the end, and the OS users it made are removed. Needs
root (useradd), Debian's chromium, and configurable-http-proxy (.ci/run installs it); under CI=true a
missing piece fails the test, elsewhere it skips.
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
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from chromium import browser, system_ready  # noqa: F401 (the fixture the logins are driven with)
from shapelab.room import accounts, loadtest, manifest
from shapelab.room.client import TIMEOUT
from shapelab.room.hub import LANDING, Room, load

ROOT = Path(__file__).resolve().parents[1]
# the room's folder, kept between runs for its learners' Python (state-learners/python): 60,000 hard links into
# the course's environment, about 8 s to make and 30 s to delete on the 2-core CI machine; the room command
# makes it again only when the course's packages change
BASE = Path(tempfile.gettempdir()) / "shapelab-room-test"
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
LEARNERS = ["roomtest-alice", "roomtest-bob"]
ATTACKER = "roomtest-eve"  # a learner on the roster too, who attacks the instructor (test_a_learner_gets_nothing...)
ROSTER = [*LEARNERS, ATTACKER]
INSTRUCTOR = "roomtest-teach"
ADMIN_TOKEN = uuid.uuid4().hex
LOAD_SECONDS = float(os.environ.get("SHAPELAB_ROOM_LOAD_SECONDS", "5"))  # 60 by hand: see INSTRUCTOR.md
OPEN_WITHIN = 60  # seconds from the command to the hub's login page (issue 26, item 5)
TESTER = f"""
c.JupyterHub.services.append({{"name": "tester", "api_token": {ADMIN_TOKEN!r}}})
c.JupyterHub.load_roles.append({{"name": "tester", "services": ["tester"],
    "scopes": ["admin:users", "admin:servers", "tokens", "list:users"]}})
"""
# A learner's own JupyterLab extension, as issue 37 found one: whoever opens her JupyterLab runs it. Its attack
# reads the room and the hub's API with the browser's cookies and tries to make her an admin and to remove a
# classmate's records; a page of her server (ATTACK_PAGE, served by her JupyterLab without a login) runs the same.
ATTACK_JS = r"""
var _JUPYTERLAB = (window._JUPYTERLAB = window._JUPYTERLAB || {});
async function roomAttack() {
  const name = location.host.split(".")[0], domain = location.host.slice(name.length + 1);  // NAME.localhost:PORT
  const hub = `${location.protocol}//${domain}`, room = `${location.protocol}//room--service.${domain}/services/room/`;
  const out = {};
  for (const [what, url, opts] of [["api/room", room + "api/room", {}], ["export.csv", room + "export.csv", {}],
      ["the hub's user", hub + "/hub/api/user", {}],
      ["make admin", hub + "/hub/api/users/" + name,
       {method: "PATCH", headers: {"Content-Type": "application/json"}, body: '{"admin": true}'}]]) {
    try {
      const r = await fetch(url, {credentials: "include", ...opts});
      out[what] = `${r.status} ${(await r.text()).slice(0, 120)}`;
    } catch (e) { out[what] = `refused: ${e.name}`; }
  }
  // requests a browser sends without asking the server first: their answers are unreadable, the test checks
  // their effect
  for (const [what, url] of [["remove (fetch)", room + "api/remove/VICTIM"],
                             ["admin (fetch)", hub + "/hub/api/users/" + name]]) {
    try {
      await fetch(url, {method: "POST", mode: "no-cors", credentials: "include", body: '{"admin": true}'});
      out[what] = "sent";
    } catch (e) { out[what] = `refused: ${e.name}`; }
  }
  const sink = document.createElement("iframe"); sink.name = "sink"; document.body.appendChild(sink);
  const form = document.createElement("form");
  form.method = "POST"; form.target = "sink"; form.action = room + "api/remove/VICTIM";
  document.body.appendChild(form);
  const sent = new Promise(done => { sink.onload = done; setTimeout(done, 5000); }); form.submit(); await sent;
  try { out["remove (form)"] = `read: ${sink.contentDocument.body.innerText.slice(0, 120)}`; }
  catch (e) { out["remove (form)"] = `sent, refused: ${e.name}`; }
  const frame = document.createElement("iframe"); document.body.appendChild(frame);
  const loaded = new Promise(done => { frame.onload = done; setTimeout(done, 5000); }); frame.src = room; await loaded;
  try { out["the room's page in a frame"] = `read: ${frame.contentDocument.body.innerText.slice(0, 120)}`; }
  catch (e) { out["the room's page in a frame"] = `refused: ${e.name}`; }
  window.roomAttack = out;
  document.title = "attack done";
  return out;
}
_JUPYTERLAB["room-attack"] = {init: () => {}, get: () => Promise.resolve(() => ({__esModule: true,
  default: {id: "room-attack:plugin", autoStart: true, activate: () => { roomAttack(); }}}))};
"""
ATTACK_PAGE = """<!doctype html><title>a learner's page</title><h1>Look at my plot!</h1><pre id="out"></pre>
<script src="remoteEntry.js"></script>
<script>
roomAttack().then(out => { document.getElementById("out").textContent = JSON.stringify(out, null, 1); });
</script>
"""

COURSE = manifest.load()
PROMPT = COURSE.lessons[0].prompts[0]           # lesson 00's reveal, as its cell has it
LAB = next(lab for lab in COURSE.labs if lab.id == "01_guards_lab")
ROOM_SCOPE = "access:services!service=room"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "the room makes OS users: run as root"
    system_ready()
    if not shutil.which("configurable-http-proxy"):
        return "configurable-http-proxy is missing (npm install -g configurable-http-proxy)"
    if not shutil.which("useradd") or not shutil.which("runuser"):
        return "useradd or runuser is missing"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method: str, url: str, token: str | None = None, body=None, raw: bytes | None = None,
            host: str | None = None):
    """(status, parsed JSON or text) for one HTTP request; errors are answers too. ``host``: the Host header
    (a learner's server is routed by its host name, NAME.localhost, reached here on 127.0.0.1)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"token {token}"
    if host:
        headers["Host"] = host
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

    def __init__(self, hub: "Hub", user: str, path: str = "notebooks/00_orientation.ipynb"):
        import websocket

        self.user = user
        self.token = hub.token(user, [f"access:servers!user={user}"])
        status, session = request("POST", f"{hub.url}/user/{user}/api/sessions", self.token, {
            "path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": "python3"}},
            host=hub.host(user))
        assert status == 201, (status, session)
        self.id = session["kernel"]["id"]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{hub.room.port}/user/{user}/api/kernels/{self.id}/channels",
            header=[f"Authorization: token {self.token}"], host=hub.host(user), suppress_origin=True, timeout=60)

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
    """The room, started by its command: ``start`` runs ``python -m shapelab.tools.room`` and waits for the
    login page, ``interrupt`` sends it SIGINT (Ctrl-C) and waits for it to end."""

    def __init__(self, base: Path, ports: dict[str, int]):
        self.base, self.ports = base, ports
        self.state, self.homes = base / "state", base / "homes"
        self.roster, self.extra = base / "roster.txt", base / "tester.py"
        self.roster.write_text("\n".join(ROSTER) + "\n")
        self.extra.write_text(TESTER)
        self.url = f"http://127.0.0.1:{ports['--port']}"  # for the hub's API; browsers use room.hub_url
        self.kernels: dict[str, Kernel] = {}
        self.proc: subprocess.Popen | None = None
        self.log = base / "room.log"
        self.opened_in = float("nan")

    def command(self, warmup: bool = False) -> list[str]:
        flags = [str(x) for flag, port in self.ports.items() for x in (flag, port)]
        return [sys.executable, "-m", "shapelab.tools.room", "--roster", str(self.roster), "--instructor", INSTRUCTOR,
                "--ip", "127.0.0.1", *flags, "--state", str(self.state), "--homes", str(self.homes),
                "--extra-config", str(self.extra), *([] if warmup else ["--no-warmup"])]

    def start(self, warmup: bool = False) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB_", "SHAPELAB_ROOM"))}
        self.kernels = {}
        with open(self.log, "a") as out:
            began, logged = time.monotonic(), out.tell()
            self.proc = subprocess.Popen(self.command(warmup), cwd=self.base, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        # the hub may answer before the room has made the accounts ready (homes private): the room says when
        while not (_answers(f"{self.url}/hub/login") and b"accounts ready" in self.log.read_bytes()[logged:]):
            if self.proc.poll() is not None or time.monotonic() - began > 2 * OPEN_WITHIN:
                raise AssertionError(f"the room did not open:\n{self.tail()}")
            time.sleep(0.2)
        self.opened_in = time.monotonic() - began
        self.room = load(self.state / "room.json")
        self.service = f"http://127.0.0.1:{self.room.service_port}/services/room"  # where kernels send
        self.codes = json.loads((self.state / "login-codes.json").read_text())  # what the instructor hands out

    def host(self, user: str) -> str:
        """The host name (and port) ``user``'s server is served on: an origin of its own."""
        return f"{user}.{self.room.domain}:{self.room.port}"

    def interrupt(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout)

    def processes(self) -> list:
        """The room command and everything under it, and every process of a learner."""
        import psutil

        uids = {accounts.pwd.getpwnam(n).pw_uid for n in ROSTER if _exists(n)}
        out = []
        if self.proc is not None and self.proc.poll() is None:
            out = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        for p in psutil.process_iter(["uids", "cmdline"]):
            try:
                if p.info["uids"].real in uids or str(self.state) in " ".join(p.info["cmdline"] or []):
                    out.append(p)
            except (psutil.Error, TypeError):
                pass
        # a zombie has exited and holds nothing (no port, no memory): only its parent's reaping is left
        return [p for p in {p.pid: p for p in out}.values() if _alive(p)]

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

        for p in psutil.Process(self.proc.pid).children(recursive=True):
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
        with sqlite3.connect(self.state / "room.sqlite") as db:
            return db.execute(sql, args).fetchall()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _exists(name: str) -> bool:
    try:
        accounts.pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _kill(processes) -> None:
    import psutil

    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=10)


@pytest.fixture(scope="module")
def hub():
    reason = _missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the room test is mandatory in CI: {reason}")
        pytest.skip(reason)
    for name in [*ROSTER, INSTRUCTOR]:  # left by a run that was killed before its teardown
        accounts.remove_user(name)
    base = BASE  # learners' homes, course and Python live under it
    base.mkdir(mode=0o755, exist_ok=True)
    assert not base.is_symlink() and base.lstat().st_uid == os.geteuid(), f"{base} is not this test's"
    base.chmod(0o755)
    _fresh(base)  # a new room each run, left by one killed before its teardown; its learners' Python is kept
    (base / "room.log").unlink(missing_ok=True)
    course_mode = ROOT.stat().st_mode
    ROOT.chmod(course_mode & ~0o007)  # what --check asks of the instructor: learners get a copy, not the repository
    ports = {flag: _free_port() for flag in ("--port", "--hub-api-port", "--proxy-api-port", "--service-port")}
    hub = Hub(base, ports)
    try:
        hub.start()
        yield hub
    finally:
        for k in hub.kernels.values():
            k.ws.close()
        left = hub.processes()
        if hub.proc is not None and hub.proc.poll() is None:  # a failed test: stop it as Ctrl-C would, then kill
            try:
                hub.interrupt()
            except subprocess.TimeoutExpired:
                pass
        _kill(left)
        ROOT.chmod(course_mode)
        shutil.copy(hub.log, Path(tempfile.gettempdir()) / "shapelab-room-test.log")  # to read after a failure
        for name in [*ROSTER, INSTRUCTOR]:
            accounts.remove_user(name)
        _fresh(base)


def _fresh(base: Path) -> None:
    for part in ("state", "homes"):
        shutil.rmtree(base / part, ignore_errors=True)


def _login(browser, hub: Hub, user: str, password: str | None = None):
    """Log in through the hub's own login page with the code the room issued for ``user`` (or ``password``);
    return the page, in the 1280 x 800 window the course is read in."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{hub.room.hub_url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.codes[user] if password is None else password)
    page.click("#login_submit")
    return page


def _alive(p) -> bool:
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _run_cells(page, cells: dict[int, str | None], wait_for: tuple[int, str]) -> None:
    """In the open notebook, run these cells as a learner does (click the cell, Shift+Enter), typing a cell's
    new source first where one is given; wait until cell ``wait_for[0]``'s output shows ``wait_for[1]``.

    As a learner does, it waits for the kernel to say Idle before running, and runs the cells once more when
    none of them started (JupyterLab can drop a Shift+Enter pressed while a kernel connects)."""
    notebook = page.locator(".jp-NotebookPanel:visible .jp-Notebook")
    try:
        page.locator(".jp-StatusBar-Widget").filter(has_text="Idle").first.wait_for(timeout=120_000)
    except Exception:
        pass  # the wait below says what did not happen
    typed = dict(cells)
    for attempt in range(2):
        for i, source in cells.items():
            editor = notebook.locator(".jp-Cell").nth(i).locator(".cm-content")
            editor.click()
            if typed.get(i) is not None:
                page.keyboard.press("Control+A")
                page.keyboard.type(typed[i])
                typed[i] = None  # typed once; a second run keeps it
            page.keyboard.press("Shift+Enter")
        prompts = [notebook.locator(".jp-Cell").nth(i).locator(".jp-InputPrompt").first for i in cells]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(p.inner_text().strip() in ("[ ]:", "") for p in prompts):
            time.sleep(1)
        if not all(p.inner_text().strip() in ("[ ]:", "") for p in prompts):
            break
    i, text = wait_for
    try:  # generous: a kernel's first import of torch on a busy 2-core machine
        notebook.locator(".jp-Cell").nth(i).locator(".jp-OutputArea-output").filter(has_text=text).first.wait_for(
            timeout=300_000)
    except Exception as e:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "room_failure.png"))
        raise AssertionError(f"cell {i} never showed {text!r}: {e}\n{notebook.inner_text()[-3000:]}") from None


def _open_notebook(page, title: str) -> None:
    """Wait until JupyterLab has drawn the notebook: its first heading and a code cell's editor on screen."""
    panel = page.locator(".jp-NotebookPanel:visible")
    panel.locator(".jp-MarkdownOutput h1").filter(has_text=title).first.wait_for(timeout=180_000)
    panel.locator(".jp-CodeCell .cm-content").first.wait_for(state="visible", timeout=30_000)


def test_check_says_what_stops_a_room(tmp_path):
    """--check: sizing from the roster, every port checked (a taken one named with its flag), a password
    refused on the command line, and an open course folder named with the command that closes it."""
    roster = tmp_path / "roster.txt"
    roster.write_text("ann\nben\n# a comment\ncid\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ports = ["--port", str(_free_port()), "--hub-api-port", str(_free_port()), "--proxy-api-port", str(busy),
                 "--service-port", str(_free_port())]
        done = subprocess.run([sys.executable, "-m", "shapelab.tools.room", "--check", "--roster", str(roster),
                               "--ip", "127.0.0.1", *ports], capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "NOT READY" in out, out
    assert out.startswith("3 learners on "), out  # the roster's count, not a fixed 30
    assert f"port {busy} on 127.0.0.1 (--proxy-api-port) is in use" in out, out
    assert sum(" is in use" in line for line in out.splitlines()) == 1, out

    secret = subprocess.run([sys.executable, "-m", "shapelab.tools.room", "--check", "--db",
                             "postgresql://room:s3cret@db.example/room"], capture_output=True, text=True, timeout=60)
    assert secret.returncode == 2 and "--db holds a password" in secret.stderr and "--db-file" in secret.stderr

    from shapelab.tools import room as command

    args = command.argparse.Namespace(roster=None, ip="127.0.0.1", domain="localhost", port=_free_port(),
                                      hub_api_port=_free_port(), proxy_api_port=_free_port(),
                                      service_port=_free_port())
    with tempfile.TemporaryDirectory() as folder:  # under /tmp, which everyone may enter
        course = Path(folder)
        course.chmod(0o755)
        said = [line for line in command.problems(args, "proxy", course) if "open to other users" in line]
        assert said and said[0].endswith(f"chmod o-rwx {course}"), said
        course.chmod(0o750)
        assert not [line for line in command.problems(args, "proxy", course) if "open to other users" in line]


def test_login_codes_ports_and_the_kubernetes_values(tmp_path, capsys):
    """Without a hub: a name's code is issued once and kept across restarts, a new roster name gets its own; the
    sheet puts the instructor first. A start waits for a port a room just stopped still holds, and says who holds
    it. The Kubernetes values give the instructor the same narrow role and each server its own host name. The
    load test's command says how to run it."""
    import threading

    import yaml

    from shapelab.room import hub as hub_config, logins
    from shapelab.tools import room as command

    dbm, codes = str(tmp_path / "passwords.dbm"), tmp_path / "codes.json"
    first = logins.issue(["ann", "teach"], dbm, codes)
    again = logins.issue(["ann", "teach", "ben"], dbm, codes)
    assert again == first | {"ben": again["ben"]} and len({*again.values()}) == 3
    assert codes.stat().st_mode & 0o777 == 0o600
    assert logins.sheet(again, "http://localhost:8000", "teach").splitlines()[2].startswith("name: teach ")

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = command.argparse.Namespace(ip="127.0.0.1", port=port, hub_api_port=_free_port(),
                                          proxy_api_port=_free_port(), service_port=_free_port())
        threading.Timer(0.3, held.close).start()  # the old room lets go
        said, began = [], time.monotonic()
        command.wait_for_ports(args, timeout=30, say=said.append)
    assert time.monotonic() - began < 10 and not command.port_in_use("127.0.0.1", port)
    assert said == [f"waiting up to 30 s for port {port} (--port), held by pid {os.getpid()}: "
                    + " ".join(__import__("psutil").Process().cmdline())[:120]], said

    values = yaml.safe_load((ROOT / "deploy" / "z2jh" / "values.yaml").read_text())
    config, roles = values["hub"]["config"], values["hub"]["loadRoles"]
    assert config["JupyterHub"]["subdomain_host"].startswith("https://")
    assert "admin_users" not in config["Authenticator"] and roles["admin"]["users"] == []
    assert roles["instructor"]["scopes"] == hub_config.INSTRUCTOR_SCOPES
    assert "logins.issue(" in values["hub"]["extraConfig"]["room"]

    with pytest.raises(SystemExit) as done:
        loadtest.main(["--help"])
    assert done.value.code == 0 and "--learners" in capsys.readouterr().out


def test_a_learner_runs_a_lesson_in_jupyterlab_and_the_instructor_sees_it(hub, browser):
    """Through the doors a person uses: a learner logs in on the hub's page and lands in JupyterLab on
    lesson 00, drawn; runs its cells there (typing a prediction) and a lab's first check; another learner
    predicts from a kernel; the instructor reads both on the room's page, in Chromium."""
    assert hub.opened_in < OPEN_WITHIN, f"the hub's login page took {hub.opened_in:.0f} s"
    print(f"\nroom: login page 200 {hub.opened_in:.1f} s after the command")
    alice, bob = LEARNERS
    began = time.monotonic()
    step = lambda what: print(f"room test: {what} at {time.monotonic() - began:.1f} s")  # noqa: E731
    hub.api("POST", f"/users/{bob}/server")  # bob's server starts meanwhile; he predicts from a kernel below
    page = _login(browser, hub, alice)
    page.wait_for_url(f"**/user/{alice}{LANDING}*", wait_until="commit", timeout=90_000)
    _open_notebook(page, "00 · Orientation")
    step(f"{alice}'s JupyterLab drew lesson 00")
    for user in LEARNERS:
        hub.wait_ready(user)
        home = hub.homes / user
        assert home.stat().st_uid == accounts.pwd.getpwnam(user).pw_uid
        assert (home / "labs").is_dir() and (home / "labs").stat().st_uid == home.stat().st_uid
        lesson = (home / "notebooks" / "00_orientation.ipynb").stat()
        assert lesson.st_uid == 0 and lesson.st_mode & 0o222 == 0  # the lessons are read-only, root's
    # cells 1, 2, 5: parameters, setup, traffic; 7 the prediction; 9 the experiment; 10 reveal
    _run_cells(page, {1: None, 2: None, 5: None, 7: "predicted = [1, 2, 3]", 9: None, 10: None},
               wait_for=(10, "You predicted"))
    step("lesson 00's cells ran")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "room_learner_lesson.png"))
    listing = page.locator(".jp-DirListing-content")  # the lab, opened from JupyterLab's file browser
    page.locator(".jp-BreadCrumbs-home").click()
    listing.locator(".jp-DirListing-item").filter(has_text="labs").first.dblclick()
    listing.locator(".jp-DirListing-item").filter(has_text=f"{LAB.id}.ipynb").first.dblclick()
    _open_notebook(page, "Lab 01")
    _run_cells(page, {1: None, 2: None, 4: None, 5: None}, wait_for=(5, LAB.exercises[0]))
    step("the lab's first check ran")
    page.context.close()

    kernel = hub.kernel(bob)
    out = kernel.run(f"import shapelab as S\npredicted, counts = [60, 1, 6], {{'a': 1}}\n{PROMPT.line}\n")
    assert "You predicted" in out and "(room:" not in out, out
    assert kernel.run("import os; print(os.getuid())").strip() == str(accounts.pwd.getpwnam(bob).pw_uid)
    print("room footprint, each learner's server and its kernel: "
          + "; ".join(f"{name} {mib:.0f} MiB" for name, mib in hub.footprint().items()))

    page = _login(browser, hub, INSTRUCTOR)  # their first login: straight to the room's page, on its own host
    page.wait_for_url(hub.room.page_url, timeout=60_000)
    assert not _exists(INSTRUCTOR) and not (hub.homes / INSTRUCTOR).exists()  # no OS user, no home
    assert hub.api("GET", f"/users/{INSTRUCTOR}")[1]["servers"] == {}  # no server
    body = page.locator("body")
    try:  # the page refreshes itself every 2 s
        for text in ["[1, 2, 3]", "[60, 1, 6]", LAB.exercises[0]]:
            body.filter(has_text=text).wait_for(timeout=20_000)
    except Exception as e:
        raise AssertionError(f"the room's page lacks {text!r}: {e}\n{page.inner_text('body')}\n{hub.tail()}") from None
    step("the instructor's page shows both")
    page.screenshot(path=str(SCREENSHOTS / "room_instructor.png"))  # to look at, as the instructor sees it
    with page.expect_download() as download:
        page.click("#export")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert {(r["user"], r["predicted"]) for r in rows if r["kind"] == "reveal"} == {(alice, "[1, 2, 3]"),
                                                                                  (bob, "[60, 1, 6]")}
    assert [(r["user"], r["passed"]) for r in rows if r["kind"] == "check"] == [(alice, "False")]
    page.context.close()


def _install_attack(hub: Hub, user: str, victim: str) -> None:
    """Put the attack extension into ``user``'s own ~/.local/share/jupyter/labextensions, owned by them, as a
    learner installs one (JupyterLab loads every extension found there)."""
    home = hub.homes / user
    folder = home / ".local" / "share" / "jupyter" / "labextensions" / "room-attack"
    (folder / "static").mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"name": "room-attack", "version": "0.1.0", "jupyterlab": {
        "_build": {"load": "static/remoteEntry.js", "extension": "./extension"}}}))
    (folder / "static" / "remoteEntry.js").write_text(ATTACK_JS.replace("VICTIM", victim))
    (folder / "static" / "attack.html").write_text(ATTACK_PAGE)
    owner = accounts.pwd.getpwnam(user)
    for path in [home / ".local", *(home / ".local").rglob("*")]:
        os.chown(path, owner.pw_uid, owner.pw_gid)


def test_a_learner_gets_nothing_in_the_instructors_browser(hub, browser):
    """Issue 37, items 1 and 2, entered as the users do, in Chromium. Someone claiming a roster name without its
    code is refused on the hub's login page; its learner gets in with it. That learner installs her own
    JupyterLab extension. The instructor, logged in on the room's page, opens her server (as from /hub/admin): the
    hub refuses, nothing of hers runs. A page of her server, opened in the instructor's browser, reads neither
    the room (api/room, export.csv, its page) nor the hub's API, makes no one an admin and removes nothing."""
    eve, bob = ATTACKER, LEARNERS[1]
    page = _login(browser, hub, eve, password="chosen-by-a-prankster")
    page.get_by_text("Invalid username or password").wait_for(timeout=30_000)
    page.context.close()
    _install_attack(hub, eve, victim=bob)
    page = _login(browser, hub, eve)
    page.wait_for_url(f"http://{hub.host(eve)}/user/{eve}/**", wait_until="commit", timeout=120_000)
    page.context.close()
    hub.wait_ready(eve)
    eve_token = hub.token(eve, [f"access:servers!user={eve}"])
    status, lab = request("GET", f"{hub.url}/user/{eve}/lab", eve_token, host=hub.host(eve))
    assert status == 200 and '"name": "room-attack"' in lab  # her JupyterLab loads it for whoever opens it

    bob_token = hub.token(bob, [ROOM_SCOPE])
    assert request("POST", f"{hub.service}/api/reveal", bob_token, _record())[0] == 201
    bobs = hub.rows("SELECT COUNT(*) FROM reveals WHERE user = ?", bob)
    teach = _login(browser, hub, INSTRUCTOR)
    teach.wait_for_url(hub.room.page_url, timeout=60_000)

    teach.goto(f"{hub.room.hub_url}/hub/admin")  # where one looks for a stuck learner: the list, with her server
    teach.get_by_text(eve, exact=True).first.wait_for(timeout=30_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    teach.screenshot(path=str(SCREENSHOTS / "room_instructor_admin.png"))
    teach.goto(f"http://{hub.host(eve)}/user/{eve}/lab")  # (a) the issue's attack: the hub asks nobody to authorize
    teach.locator("body").filter(has_text="403").wait_for(timeout=30_000)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    teach.screenshot(path=str(SCREENSHOTS / "room_attack_server_refused.png"))
    assert not teach.locator("text=Authorize").count() and teach.evaluate("window.roomAttack") is None
    teach.goto(f"http://{hub.host(eve)}/user/{eve}/lab/extensions/room-attack/static/attack.html")  # (b)
    teach.wait_for_function("document.title === 'attack done'", timeout=60_000)
    out = teach.evaluate("window.roomAttack")
    teach.screenshot(path=str(SCREENSHOTS / "room_attack_page.png"))
    print(f"\nroom attack from {eve}'s page in the instructor's browser: {json.dumps(out)}")
    for what in ["api/room", "export.csv", "the hub's user", "make admin", "the room's page in a frame"]:
        assert out[what].startswith("refused"), (what, out)
    # where learners' names share the hub's site (room.example.org, ann.room.example.org), a learner's page may
    # send the instructor's cookies with such simple requests: the hub and the room ask for their XSRF token too
    def with_cookies(method: str, url: str, body=None) -> int:  # the instructor's cookies, no XSRF token
        jar = "; ".join(f"{c['name']}={c['value']}" for c in teach.context.cookies(url))
        parts = urllib.parse.urlsplit(url)  # *.localhost resolves in Chromium only: send it to 127.0.0.1
        req = urllib.request.Request(f"http://127.0.0.1:{parts.port}{parts.path}", method=method, headers={
            "Host": parts.netloc, "Cookie": jar, "Content-Type": "application/json"},
            data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert with_cookies("GET", hub.room.page_url + "api/room") == 200  # the cookies are the instructor's
    assert with_cookies("POST", hub.room.page_url + f"api/remove/{bob}") == 403
    assert with_cookies("PATCH", f"{hub.room.hub_url}/hub/api/users/{eve}", {"admin": True}) == 403
    assert hub.rows("SELECT COUNT(*) FROM reveals WHERE user = ?", bob) == bobs  # nothing removed
    assert {k: hub.api("GET", f"/users/{k}")[1]["admin"] for k in (eve, INSTRUCTOR)} == {eve: False, INSTRUCTOR: False}
    assert sorted(hub.api("GET", f"/users/{eve}")[1]["roles"]) == ["user"]
    # with every right the instructor's account holds (a token that inherits them): no role changed, no server opened
    status, model = hub.api("POST", f"/users/{INSTRUCTOR}/tokens", {"note": "all the instructor may"})
    assert status == 201, model
    assert request("PATCH", f"{hub.url}/hub/api/users/{eve}", model["token"], {"admin": True})[0] == 403
    assert request("GET", f"{hub.url}/user/{eve}/api/status", model["token"], host=hub.host(eve))[0] == 403
    assert request("GET", f"{hub.url}/hub/api/users", model["token"])[0] == 200  # what /hub/admin lists
    assert request("DELETE", f"{hub.url}/hub/api/users/{eve}/server", model["token"])[0] in (202, 204)  # a stuck one
    teach.context.close()
    status, answer = hub.api("POST", f"/users/{INSTRUCTOR}/server")  # the hub's "Start My Server", for them
    assert status >= 400 and "no server in the room" in json.dumps(answer), (status, answer)
    assert not _exists(INSTRUCTOR) and not (hub.homes / INSTRUCTOR).exists()  # no OS user, no home


def test_learners_read_only_what_is_theirs(hub):
    """As a learner's OS user: another learner's home, files and history, the solutions, the repository and
    the room's state are refused; their own labs, the lessons and the library (from the learners' copy) are
    read. What a learner's kernel writes is theirs alone, and no secret is on any process's command line."""
    import psutil

    alice, bob = LEARNERS
    if not hub.api("GET", f"/users/{alice}")[1]["servers"].get("", {}).get("ready"):  # when run alone
        hub.api("POST", f"/users/{alice}/server")
        hub.wait_ready(alice)
    kernel = hub.kernel(bob)
    out = kernel.run("import os; os.chdir(os.path.expanduser('~')); open('notes.txt', 'w').write('my answer'); "
                     "os.makedirs('work', exist_ok=True)")
    assert "Error" not in out, out
    kernel.run("print(1 + 1)")  # IPython keeps it in ~/.ipython/profile_default/history.sqlite
    home = hub.homes / bob
    history = home / ".ipython" / "profile_default" / "history.sqlite"
    deadline = time.monotonic() + 30
    while not history.exists():  # IPython writes it from a thread of its own
        assert time.monotonic() < deadline, "no IPython history"
        time.sleep(0.2)
    for path, mode in [(home, 0o700), (home / "notes.txt", 0o600), (home / "work", 0o700), (history, 0o600)]:
        assert path.stat().st_mode & 0o777 == mode, (path, oct(path.stat().st_mode))
    assert all(p.stat().st_mode & 0o077 == 0 for p in (home / "labs").rglob("*")), "a lab copy is readable by others"
    service = hub.service_pid()
    refused = [home, home / "notes.txt", home / "labs" / f"{LAB.id}.ipynb", history, ROOT / "solutions" / f"{LAB.id}.ipynb",
               ROOT / ".git", ROOT / "tests" / "test_room.py", ROOT / "utils" / "shapelab" / "__init__.py",
               hub.state / "room.sqlite", hub.state / "jupyterhub_cookie_secret", hub.state / "room.json",
               Path(f"/proc/{service}/environ")]
    allowed = [hub.homes / alice / "labs" / f"{LAB.id}.ipynb", hub.homes / alice / "notebooks" / "00_orientation.ipynb"]
    assert [p for p in refused + allowed if not p.exists()] == []  # each is there, for root
    probe = """
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        os.listdir(path) if os.path.isdir(path) else open(path, "rb").read(1)
        out[path] = "read"
    except OSError as e:
        out[path] = type(e).__name__
import shapelab
out["shapelab"] = shapelab.__file__
print(json.dumps(out))
"""
    done = subprocess.run(["runuser", "-u", alice, "--", hub.room.learner_python, "-c", probe,
                           *map(str, refused + allowed)], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert {p: seen[str(p)] for p in refused} == {p: "PermissionError" for p in refused}
    assert {p: seen[str(p)] for p in allowed} == {p: "read" for p in allowed}
    assert seen["shapelab"].startswith(hub.room.course + "/"), seen["shapelab"]

    secrets = {"the tester's token": ADMIN_TOKEN, "the store": "room.sqlite"}
    for pid, what in [(service, "the service's token")] + [(p.pid, f"{p.username()}'s token") for p in hub.processes()
                                                             if p.username() in LEARNERS]:
        env = dict(line.split("=", 1) for line in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in line)
        if env.get("JUPYTERHUB_API_TOKEN"):
            secrets[what] = env["JUPYTERHUB_API_TOKEN"]
    assert len(secrets) >= 4, secrets
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        shown = [what for what, secret in secrets.items() if secret in line and p.pid != os.getpid()]
        assert not shown, f"{shown} on the command line of {p.pid}: {line[:300]}"


def _record(**changes) -> dict:
    record = {"id": uuid.uuid4().hex, "lesson": COURSE.lessons[0].id, "prompt": PROMPT.line, "predicted": "1",
              "measured": "1", "agreed": True}
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


def test_room_refuses_what_it_must(hub):
    """Item 4: 403 on another's records and the instructor page, no writing as someone else, 400 and
    nothing stored for bad payloads, nothing acknowledged lost on restart, no hang when the room is slow."""
    alice, bob = LEARNERS
    scope = ROOM_SCOPE
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
    assert request("GET", f"{hub.url}/user/{bob}/api/status", alice_token, host=hub.host(bob))[0] == 403

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
    assert request("POST", f"{svc}/api/reveal", alice_token, record) == (201, {"stored": True, "id": record["id"], "round": 1})
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
    ids = sorted(load.acknowledged)
    stored = hub.rows(f"SELECT id, user, COUNT(*) FROM reveals WHERE id IN ({','.join('?' * len(ids))}) GROUP BY id", *ids)
    print(f"\nroom load: {len(names)} learners x {LOAD_SECONDS:g} s: {load.sent} sent (+{load.resent} resent), "
          f"{len(load.acknowledged)} acknowledged, {len(stored)} stored, {len(load.failed)} failed; "
          f"p95 {1000 * load.p95():.1f} ms ({1000 * load.p95(steady=True):.1f} ms after each learner's first), "
          f"median {1000 * sorted(load.latencies)[len(load.latencies) // 2]:.1f} ms, max {1000 * max(load.latencies):.1f} ms")
    assert load.failed == []
    assert load.sent == len(names) * int(LOAD_SECONDS) and load.resent > 0
    assert {i: u for i, u, _ in stored} == load.acknowledged  # none lost, each as its sender
    assert all(n == 1 for *_, n in stored)  # none duplicated, the resent ones included
    assert load.p95() < TIMEOUT


def test_ctrl_c_stops_everything_and_the_room_starts_again(hub):
    """SIGINT to the room command (Ctrl-C) stops the hub, proxy, services, every learner's server and kernel
    and frees every port; the next start on the same --state opens within a minute, with the warm-up
    running in the background, accounts kept and homes made private again; Ctrl-C then stops the warm-up too."""
    import psutil

    alice, bob = LEARNERS
    hub.kernel(alice), hub.kernel(bob)  # a server and a kernel each
    running = hub.processes()
    kinds = " ".join(" ".join(p.cmdline()) for p in running)
    for what in ["jupyterhub", "configurable-http-proxy", "shapelab.room.service", "jupyterhub_idle_culler",
                 "jupyterhub.singleuser", "ipykernel"]:
        assert what in kinds, f"{what} is not running before the stop"
    for k in hub.kernels.values():
        k.ws.close()
    began = time.monotonic()
    assert hub.interrupt() == 0, hub.tail()
    # a learner's kernel may still be exiting when the command returns on a loaded machine: a few seconds, not more
    psutil.wait_procs([p for p in running if _alive(p)], timeout=10)
    print(f"\nroom: Ctrl-C to everything stopped in {time.monotonic() - began:.1f} s")
    assert not [p for p in running if _alive(p)]
    assert not hub.processes()
    assert f"the session report: {hub.state / 'report' / 'report.html'}" in hub.log.read_text(), hub.tail()
    stop = hub.log.read_text().rsplit("stopping the room", 1)[1]
    assert "Traceback" not in stop, stop  # issue 37.6: about 60 lines of them before "the room is stopped"
    assert (hub.state / "report" / "report.csv").read_text().startswith("session,lesson,concept,")
    for flag, port in hub.ports.items():
        with socket.socket() as s:  # as a server binds: a closed connection's TIME_WAIT does not count, a listener does
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))

    uids = {name: accounts.pwd.getpwnam(name).pw_uid for name in LEARNERS}
    (hub.homes / bob).chmod(0o755)  # as an older room left them
    (hub.homes / bob / "labs" / f"{LAB.id}.ipynb").chmod(0o644)
    hub.start(warmup=True)
    assert hub.opened_in < OPEN_WITHIN, f"the second start took {hub.opened_in:.0f} s to open"
    print(f"room: second start, warm-up on, login page 200 {hub.opened_in:.1f} s after the command")
    assert {name: accounts.pwd.getpwnam(name).pw_uid for name in LEARNERS} == uids
    assert (hub.homes / bob).stat().st_mode & 0o777 == 0o700
    assert (hub.homes / bob / "labs" / f"{LAB.id}.ipynb").stat().st_mode & 0o777 == 0o600
    assert hub.api("GET", f"/users/{alice}")[0] == 200
    # The warm-up runs niced: on a loaded machine its own first line can come late, so the test waits for the
    # room to say it started one and for its process, not for the warm-up's output. (Inside CI runs this test took
    # 8-70 s: both stops passed the room's 30 s limit while the hub stopped its services one at a time, 10 s of
    # SIGINT grace each; the room's hub configuration makes that 1 s, tests/test_room_units.py.)
    deadline, warming = time.monotonic() + 30, []
    while not warming:
        assert time.monotonic() < deadline, f"no warm-up process:\n{hub.tail()}"
        time.sleep(0.3)
        warming = [p for p in hub.processes() if "shapelab.tools.warmup" in " ".join(p.cmdline())]
    assert "warming Inductor's cache in the background" in hub.log.read_text(), hub.tail()
    assert hub.interrupt() == 0, hub.tail()
    assert not hub.processes(), [" ".join(p.cmdline()) for p in hub.processes()]
