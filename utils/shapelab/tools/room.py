"""Start a room: a live lab session on JupyterHub on this machine, with the room's predictions in view.

    python -m shapelab.tools.room --roster roster.txt      # only these learners (one name a line)
    python -m shapelab.tools.room                          # anyone signs up on first login
    python -m shapelab.tools.room --check                  # say what is missing and what it would run

It runs a real JupyterHub (run as root: it makes each learner an OS user) behind its proxy,
``configurable-http-proxy`` (found on PATH, or installed with npm when npm is there). Every name on
the roster, and the instructor's, gets a login code (``<state>/login-codes.txt``, slips to print and
hand out): a learner logs in with their name and code, so nobody can claim another's name. Each learner
gets a private home with their own copy of ``labs/`` and the lessons read-only in ``notebooks/``, and
lands in JupyterLab on lesson 00, served from a host name of their own (``NAME.DOMAIN``, ``--domain``),
so nothing of a learner's server runs on the hub's or the room's origin.
Learners' servers run a Python of their own beside ``--state`` (links to the course's packages) and
a copy of the course holding only ``notebooks/``, ``labs/`` and the library: they never read the
repository, which must therefore be closed to other users (``--check`` says how). The instructor
(``--instructor``; no hub admin: the room's page and the hub's list of users, never a learner's server)
lands on the room's page, ``room--service.DOMAIN``, and gets no server, home or OS user. Once the hub
answers, Inductor's cache is warmed in the background (``tools.warmup``, only the lessons that fill it)
and copied into every learner's own cache at their server's start. A start finding a port still held
(by a room stopped a moment ago) waits for it, up to ``PORT_WAIT`` seconds.
Idle servers stop after ``--idle-timeout`` seconds. Ctrl-C stops the hub, its proxy and services,
every learner's server and kernel, and writes the session report into ``<state>/report/``
(``shapelab.room.report``).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

COURSE = Path(__file__).resolve().parents[3]  # utils/shapelab/tools/room.py -> the course's folder
# per learner (INSTRUCTOR.md, "Sizing"): a lesson's kernel peaked at 0.49-0.62 GiB (lessons 00 and 01,
# CI and full size, CPU, measured); 2 GiB leaves room for the server, the lessons not measured and the
# learner's own experiments
MEM_PER_LEARNER_GIB = 2
DEFAULT_LEARNERS = 30       # what the limits are sized for without a roster or --learners
OPEN_TIMEOUT = 120          # seconds the hub may take to answer its login page
STOP_TIMEOUT = 30           # seconds the hub may take to stop its servers, services and proxy
PORT_WAIT = 60              # seconds a start waits for a port a room just stopped still holds


def find_proxy(install: bool, say=print) -> str | None:
    """The path of configurable-http-proxy; installed with npm when missing and ``install``."""
    found = shutil.which("configurable-http-proxy")
    if found or not install:
        return found
    if not shutil.which("npm"):
        say("missing: configurable-http-proxy, and npm to install it (Debian: apt-get install nodejs npm; "
            "then npm install -g configurable-http-proxy)")
        return None
    say("installing JupyterHub's proxy: npm install -g configurable-http-proxy")
    done = subprocess.run(["npm", "install", "-g", "configurable-http-proxy"], capture_output=True, text=True)
    if done.returncode != 0:
        say(f"npm could not install configurable-http-proxy:\n{done.stderr[-1500:]}")
    return shutil.which("configurable-http-proxy")


def ports(args) -> dict[str, tuple[str, int]]:
    """Each port the room listens on: ``{flag: (address, port)}``."""
    public = args.ip or "0.0.0.0"
    return {"--port": (public, args.port), "--hub-api-port": ("127.0.0.1", args.hub_api_port),
            "--proxy-api-port": ("127.0.0.1", args.proxy_api_port), "--service-port": ("127.0.0.1", args.service_port)}


def port_in_use(address: str, port: int) -> bool:
    """Whether something listens on ``port`` (bound as the hub and proxy bind: a closed connection's TIME_WAIT,
    left by a room just stopped, does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return True
    return False


def holder(port: int) -> str:
    """Who listens on ``port`` ("pid N: command"), or "" when nobody or it cannot be seen."""
    import psutil

    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid}: {' '.join(psutil.Process(conn.pid).cmdline())[:120]}"
    except (psutil.Error, OSError):
        pass
    return ""


def wait_for_ports(args, timeout: float = PORT_WAIT, say=print) -> None:
    """Wait up to ``timeout`` for the room's ports to be free, saying once which are held and by whom (a room
    stopped a moment ago may still be letting go of them); the start's check then names what stays taken."""
    taken = {flag: where for flag, where in ports(args).items() if port_in_use(*where)}
    if not taken:
        return
    say("waiting up to {:.0f} s for ".format(timeout) + "; ".join(
        f"port {port} ({flag}), held by {holder(port) or 'another program'}" for flag, (_, port) in taken.items()))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(port_in_use(*where) for where in taken.values()):
        time.sleep(0.5)


def problems(args, proxy: str | None, course: Path = COURSE) -> list[str]:
    """What stops a room from starting here, one line each (empty: ready)."""
    from shapelab.room.accounts import NAME, readable_by_others

    out = []
    for module, package in [("jupyterhub", "jupyterhub"), ("firstuseauthenticator", "jupyterhub-firstuseauthenticator"),
                            ("jupyterhub_idle_culler", "jupyterhub-idle-culler")]:
        if importlib.util.find_spec(module) is None:
            out.append(f"missing: the Python package {package} (pip install {package})")
    if proxy is None:
        out.append("missing: configurable-http-proxy (npm install -g configurable-http-proxy)")
    if os.geteuid() != 0:
        out.append("not root: the room makes each learner an OS user (useradd) and starts their server as them")
    if not shutil.which("useradd"):
        out.append("missing: useradd (the shadow/passwd package)")
    if args.roster and not Path(args.roster).is_file():
        out.append(f"no roster file at {args.roster}")
    elif args.roster:
        bad = [n for n in read_roster(args.roster) if not NAME.fullmatch(n)]
        if bad:
            out.append(f"not OS user names in {args.roster} (lower-case letters, digits, - and _): {', '.join(bad)}")
    if readable_by_others(course):
        out.append(f"the course's folder {course} is open to other users: learners could read solutions/, tests/ "
                   f"and .git there; close it (learners get a copy of what they need): chmod o-rwx {course}")
    taken = ports(args)
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", args.domain):
        out.append(f"--domain {args.domain!r} is not a host name (lower-case letters, digits, '.' and '-')")
    if len({port for _, port in taken.values()}) < len(taken):
        out.append("two of " + ", ".join(taken) + " are the same port")
    for flag, (address, port) in taken.items():
        if port_in_use(address, port):
            out.append(f"port {port} on {address} ({flag}) is in use: another room or program listens there; "
                       f"choose another with {flag}")
    return out


def sizing(learners: int) -> tuple[str, float, int, str]:
    """Per-learner memory and CPU limits, threads per kernel, and a line on whether the machine holds the room."""
    cores = os.cpu_count() or 1
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 0.0
    cpu = round(max(cores / learners, 0.1), 2)
    threads = max(1, cores // learners)
    holds = int(mem_gib // MEM_PER_LEARNER_GIB) if mem_gib else learners
    line = (f"{learners} learners on {cores} cores and {mem_gib:.0f} GiB: {cpu} core(s) and {MEM_PER_LEARNER_GIB} GiB "
            f"each, {threads} thread(s) per kernel")
    if holds < learners:
        line += f"; WARNING: memory holds about {holds} learners at {MEM_PER_LEARNER_GIB} GiB each"
    return f"{MEM_PER_LEARNER_GIB}G", cpu, threads, line


def read_roster(path: str) -> list[str]:
    """The learner names in a roster file: one a line, ``#`` starts a comment."""
    lines = (l.split("#", 1)[0].strip() for l in Path(path).read_text().splitlines())
    return [l for l in lines if l]


def store_url(args, error) -> str:
    """The room service's store: ``--db`` (no password: it would be on this command's line) or ``--db-file``."""
    if args.db and urllib.parse.urlsplit(args.db).password:
        error("--db holds a password, which every user of this machine could read on the command line: "
              "write the URL into a file only root reads (chmod 600) and pass --db-file")
    if not args.db_file:
        return args.db
    mode = os.stat(args.db_file).st_mode
    if mode & 0o077:
        error(f"--db-file {args.db_file} is readable by others (mode {stat.filemode(mode)}): chmod 600 {args.db_file}")
    return Path(args.db_file).read_text().strip()


def open_url(url: str, timeout: float) -> bool:
    """Wait until ``url`` answers 200 (True), or ``timeout`` passes (False)."""
    import ssl

    deadline = time.monotonic() + timeout
    context = ssl._create_unverified_context() if url.startswith("https") else None  # our own certificate, any name
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                if r.status == 200:
                    return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.2)
    return False


def descendants(pid: int) -> list:
    """Every process under ``pid`` (psutil processes), children first listed; [] when it is gone."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def stop_all(hub: subprocess.Popen, others: list, proxy_pid_file: Path, say=print) -> None:
    """Stop the hub as JupyterHub stops (SIGTERM: it stops every server, its services and its proxy),
    then kill what is left of the processes seen under it, by PID and process group, waiting a bounded time."""
    import psutil

    seen = descendants(hub.pid)
    for p in others:
        if p.poll() is None:
            seen += [psutil.Process(p.pid), *descendants(p.pid)]
    try:
        seen.append(psutil.Process(int(proxy_pid_file.read_text())))
    except (OSError, ValueError, psutil.Error):
        pass
    for p in others:
        _signal_group(p.pid, signal.SIGTERM)
    if hub.poll() is None:
        hub.send_signal(signal.SIGTERM)
        try:
            hub.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            say(f"the hub did not stop within {STOP_TIMEOUT} s: killing it")
    left = [p for p in [psutil.Process(hub.pid) if hub.poll() is None else None, *seen] if p is not None and _alive(p)]
    names = sorted({_label(p) for p in left})  # before the kill: said after it, for whoever reads why a stop was slow
    for p in left:
        _signal_group(p.pid, signal.SIGKILL)
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=5)
    hub.poll()
    for p in others:
        p.poll()
    if left:
        say(f"killed {len(left)} process(es) left after the hub stopped: {', '.join(names)}")


def _command(p) -> str:
    import psutil

    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _label(p) -> str:
    """A process as its command says it: the module after ``-m``, else the program's name."""
    words = _command(p).split()
    return words[words.index("-m") + 1] if "-m" in words[:-1] else (words[0].rsplit("/", 1)[-1] if words else "?")


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid`` (servers and the warm-up lead their own, with their kernels)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
    except OSError:
        pass


def _relay(stream, prefix: str) -> None:
    for line in stream:
        print(prefix + line.rstrip("\n"), flush=True)


def main(argv=None) -> int:
    """Check, make the learners' course and Python, run JupyterHub until stopped, warming the cache meanwhile."""
    p = argparse.ArgumentParser(prog="python -m shapelab.tools.room", description=__doc__.split("\n\n")[0],
                                epilog="See INSTRUCTOR.md, 'Running a session with the room'.")
    p.add_argument("--roster", help="a file with one learner name a line (default: anyone may sign up on first login)")
    p.add_argument("--instructor", default="instructor", help="the instructor's user name (sees the room's page; "
                                                             "no hub admin, no server)")
    p.add_argument("--learners", type=int, help="how many learners to size the limits for "
                                                f"(default: the roster's, else {DEFAULT_LEARNERS})")
    p.add_argument("--ip", default="", help="the address to listen on (default: every interface)")
    p.add_argument("--domain", default="localhost",
                   help="the host name learners reach this machine by; each learner's server is served at "
                        "NAME.DOMAIN, so it needs a wildcard DNS record (*.DOMAIN); the default, localhost, "
                        "is reached only by browsers on this machine (Chromium resolves *.localhost itself)")
    p.add_argument("--port", type=int, default=8000, help="the hub's public port, learners' URL (default 8000)")
    p.add_argument("--hub-api-port", type=int, default=8081, help="the hub's API on the loopback (default 8081)")
    p.add_argument("--proxy-api-port", type=int, default=8001, help="the proxy's API on the loopback (default 8001)")
    p.add_argument("--service-port", type=int, default=10101, help="the room service on the loopback (default 10101)")
    p.add_argument("--state", default="/srv/shapelab-room", help="the room's files: databases, passwords, warmed cache "
                                                                 "(learners' Python and course go beside it)")
    p.add_argument("--homes", default="/home", help="where learners' homes are made (default /home)")
    p.add_argument("--db", default="", help="the room service's store: a SQLAlchemy URL without a password (default "
                                            "SQLite in --state; postgresql://... for a hub on several machines)")
    p.add_argument("--db-file", default="", help="a file only root reads holding the store's URL (with its password)")
    p.add_argument("--idle-timeout", type=int, default=3600, help="seconds before an idle server is stopped")
    p.add_argument("--warmup-scale", default="auto", choices=("auto", "ci", "full"),
                   help="the SCALE to warm Inductor's cache for (default auto)")
    p.add_argument("--no-warmup", action="store_true", help="skip warming Inductor's cache")
    p.add_argument("--ssl-cert", default="", help="TLS certificate (serve https)")
    p.add_argument("--ssl-key", default="", help="TLS key")
    p.add_argument("--extra-config", default="", help="a Python file appended to the hub's configuration")
    p.add_argument("--check", action="store_true", help="only say what is missing and what the room would be")
    args = p.parse_args(argv)
    if args.learners is not None and args.learners < 1:
        p.error("--learners must be at least 1")
    db = store_url(args, p.error)

    from shapelab.room import accounts
    from shapelab.room.hub import READY, SHEET, Room, write_config

    learners = read_roster(args.roster) if args.roster and Path(args.roster).is_file() else None
    count = args.learners or (len(learners) if learners else DEFAULT_LEARNERS)
    proxy = find_proxy(install=not args.check)
    mem, cpu, threads, line = sizing(count)
    print(line)
    missing = problems(args, proxy)
    if missing and not args.check and all(" is in use: " in m for m in missing):
        wait_for_ports(args)  # a room stopped a moment ago may still hold them
        missing = problems(args, proxy)
    for m in missing:
        print(m)
    state = Path(args.state).resolve()
    beside = state.with_name(state.name + "-learners")  # readable by learners, unlike the state
    room = Room(course=str(beside / "course"), state=str(state), homes=args.homes, instructor=args.instructor,
                learners=learners, ip=args.ip, domain=args.domain, port=args.port, proxy_api_port=args.proxy_api_port,
                hub_port=args.hub_api_port, service_port=args.service_port, db=db, idle_timeout=args.idle_timeout,
                mem_limit=mem, cpu_limit=cpu, threads=threads, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    who = f"{len(learners)} learners from {args.roster}" if learners is not None else "anyone who signs up"
    where = ", ".join(f"{flag} {port}" for flag, (_, port) in ports(args).items())
    print(f"room: {who}; instructor {args.instructor}; ports {where}; state {state}")
    if args.domain == "localhost" and args.ip not in ("127.0.0.1", "localhost"):
        print("note: with --domain localhost only browsers on this machine reach learners' servers (NAME.localhost); "
              "learners on other machines need --domain NAME with a wildcard DNS record (INSTRUCTOR.md, part 4)")
    if args.check:
        print("READY" if not missing else "NOT READY")
        return 0 if not missing else 1
    if missing:
        print("NOT READY: the room did not start")
        return 1

    import psutil

    start = time.monotonic() - (time.time() - psutil.Process().create_time())  # when the command began
    beside.mkdir(parents=True, exist_ok=True)
    beside.chmod(0o755)
    (beside / READY).unlink(missing_ok=True)  # servers wait for it (hub.configure): made below, once all is there
    room.learner_python = str(beside / "python" / "bin" / "python")
    extra = Path(args.extra_config).read_text() if args.extra_config else ""
    config = write_config(room, extra)
    env = dict(os.environ, PATH=f"{Path(proxy).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    # its own session: Ctrl-C reaches this command only, which stops the hub in order (stop_all)
    hub = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                           start_new_session=True)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    others: list[subprocess.Popen] = []
    opened = False
    try:  # while the hub starts: the learners' course, Python and accounts
        accounts.course_copy(COURSE, Path(room.course))
        accounts.learner_env(sys.executable, Path(room.course), beside / "python")  # its bin/python: learner_python
        for name in learners or []:  # accounts made once, kept after; homes made private at every start
            user = accounts.ensure_user(name, Path(args.homes))
            accounts.make_private(Path(user.pw_dir), user)
        (beside / READY).touch()
        print(f"learners' course and Python in {beside}, {len(learners or [])} accounts ready "
              f"({time.monotonic() - start:.1f} s)", flush=True)
        scheme = "https" if args.ssl_cert else "http"
        local = f"{scheme}://{args.ip or '127.0.0.1'}:{args.port}"  # the proxy sends any other host name to the hub
        if not _wait(lambda: open_url(f"{local}/hub/login", 1), hub, stopping, OPEN_TIMEOUT):
            return hub.returncode or 1
        print(f"the room is open at {room.hub_url}/ ({time.monotonic() - start:.0f} s after the command); Ctrl-C "
              f"stops it\nlogin codes, one slip per name (the instructor's first): {state / SHEET}\n"
              f"the instructor ({args.instructor}) logs in with their code and lands on the room's page, "
              f"{room.page_url}: no server, home or OS user is made for them", flush=True)
        opened = True
        if not args.no_warmup:
            # with the learners' own Python: Inductor's cache keys include the interpreter
            print(f"warming Inductor's cache in the background, niced (--no-warmup to skip): learners who start "
                  f"before it ends get what it holds by then and compile the rest themselves", flush=True)
            warm = subprocess.Popen(["nice", "-n", "10", room.learner_python, "-m", "shapelab.tools.warmup",
                                     "--scale", args.warmup_scale, "--cache-dir", str(room.cache)],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            others.append(warm)
            threading.Thread(target=_relay, args=(warm.stdout, "warm-up: "), daemon=True).start()
        _wait(lambda: False, hub, stopping, None)
        return 0 if stopping.is_set() else (hub.returncode or 1)
    finally:
        print("stopping the room: the hub, its proxy and services, every learner's server and kernel", flush=True)
        stop_all(hub, others, state / "proxy.pid")
        print("the room is stopped", flush=True)
        if opened:
            write_report(room.store_url, state / "report")


def write_report(db: str, out: Path) -> None:
    """The session report (``shapelab.room.report``) into ``out``, said in one line; a store that cannot be read
    costs one line too, never the stop."""
    from shapelab.room import manifest, report, store

    try:
        records = store.Store(db)
        html, csv_ = report.write(records, manifest.load(), out)
        records.engine.dispose()
        print(f"the session report: {html} and {csv_} (python -m shapelab.room.report writes it again)", flush=True)
    except Exception as e:  # the room is stopped already: a report is a bonus
        print(f"no session report: {type(e).__name__}: {e}"[:300], flush=True)


def _wait(done, hub: subprocess.Popen, stopping: threading.Event, timeout: float | None) -> bool:
    """Wait until ``done()``; False when the hub exits, Ctrl-C comes, or ``timeout`` passes first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not done():
        if hub.poll() is not None or stopping.is_set():
            return False
        if deadline is not None and time.monotonic() > deadline:
            print(f"the hub did not answer within {timeout} s")
            return False
        stopping.wait(0.3)
    return True


if __name__ == "__main__":
    sys.exit(main())
