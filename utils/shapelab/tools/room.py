"""Start a room: a live lab session on JupyterHub on this machine, with the room's predictions in view.

    python -m shapelab.tools.room                          # a room of 30; anyone signs up on first login
    python -m shapelab.tools.room --roster roster.txt      # only these learners (one name a line)
    python -m shapelab.tools.room --check                  # say what is missing and what it would run

It runs a real JupyterHub (run as root: it makes each learner an OS user) behind its proxy,
``configurable-http-proxy`` (found on PATH, or installed with npm when npm is there). Learners log
in with a name and choose their password on first login; each gets a home with their own copy of
``labs/`` and the lessons read-only in ``notebooks/``, and lands in JupyterLab on lesson 00. The
instructor (``--instructor``, the hub's admin) opens ``/services/room/`` for the room's predictions
and lab progress. Inductor's cache is warmed once for the room (``tools.warmup``) and copied into
every learner's own cache (Inductor writes lock files beside what it reads). Idle servers stop after
``--idle-timeout`` seconds.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

COURSE = Path(__file__).resolve().parents[3]  # utils/shapelab/tools/room.py -> the course's folder
# per learner (INSTRUCTOR.md, "Sizing"): a lesson's kernel peaked at 0.49-0.62 GiB (lessons 00 and 01,
# CI and full size, CPU, measured); 2 GiB leaves room for the server, the lessons not measured and the
# learner's own experiments
MEM_PER_LEARNER_GIB = 2


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


def problems(args, proxy: str | None) -> list[str]:
    """What stops a room from starting here, one line each (empty: ready)."""
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


def main(argv=None) -> int:
    """Check, warm up, write the hub's configuration and run JupyterHub until stopped."""
    p = argparse.ArgumentParser(prog="python -m shapelab.tools.room", description=__doc__.split("\n\n")[0],
                                epilog="See INSTRUCTOR.md, 'Running a session with the room'.")
    p.add_argument("--roster", help="a file with one learner name a line (default: anyone may sign up on first login)")
    p.add_argument("--instructor", default="instructor", help="the instructor's (the hub admin's) user name")
    p.add_argument("--learners", type=int, default=30, help="how many learners to size the limits for (default 30)")
    p.add_argument("--ip", default="", help="the address to listen on (default: every interface)")
    p.add_argument("--port", type=int, default=8000, help="the hub's public port (default 8000)")
    p.add_argument("--state", default="/srv/shapelab-room", help="the room's files: databases, passwords, warmed cache")
    p.add_argument("--homes", default="/home", help="where learners' homes are made (default /home)")
    p.add_argument("--db", default="", help="the room service's store: a SQLAlchemy URL (default SQLite in --state; "
                                            "postgresql://... for a hub on several machines)")
    p.add_argument("--idle-timeout", type=int, default=3600, help="seconds before an idle server is stopped")
    p.add_argument("--warmup-scale", default="auto", choices=("auto", "ci", "full"),
                   help="the SCALE to warm Inductor's cache for (default auto)")
    p.add_argument("--no-warmup", action="store_true", help="skip warming Inductor's cache")
    p.add_argument("--ssl-cert", default="", help="TLS certificate (serve https)")
    p.add_argument("--ssl-key", default="", help="TLS key")
    p.add_argument("--check", action="store_true", help="only say what is missing and what the room would be")
    args = p.parse_args(argv)
    if args.learners < 1:
        p.error("--learners must be at least 1")

    from shapelab.room.hub import Room, write_config

    proxy = find_proxy(install=not args.check)
    mem, cpu, threads, line = sizing(args.learners)
    print(line)
    missing = problems(args, proxy)
    for m in missing:
        print(m)
    learners = read_roster(args.roster) if args.roster and Path(args.roster).is_file() else None
    room = Room(course=str(COURSE), state=args.state, homes=args.homes, instructor=args.instructor, learners=learners,
                ip=args.ip, port=args.port, db=args.db, idle_timeout=args.idle_timeout, mem_limit=mem, cpu_limit=cpu,
                threads=threads, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    who = f"{len(learners)} learners from {args.roster}" if learners is not None else "anyone who signs up"
    print(f"room: {who}; instructor {args.instructor}; hub on port {args.port}; store {room.store_url}")
    if args.check:
        print("READY" if not missing else "NOT READY")
        return 0 if not missing else 1
    if missing:
        return 1
    from shapelab.room.accounts import learner_python
    room.learner_python = learner_python(sys.executable, Path(f"{args.state.rstrip('/')}-python"))
    config = write_config(room)
    if not args.no_warmup:
        # with the learners' own Python: Inductor's cache keys include the interpreter, so a cache
        # warmed by another Python would not answer their compiles
        print(f"warming Inductor's cache for the room in {room.cache} (--no-warmup to skip)", flush=True)
        subprocess.call([room.learner_python, "-m", "shapelab.tools.warmup", "--scale", args.warmup_scale,
                         "--cache-dir", str(room.cache)])
    print(f"starting JupyterHub with {config}; the instructor's page: /services/room/", flush=True)
    env = dict(os.environ, PATH=f"{Path(proxy).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.call([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=args.state, env=env)


if __name__ == "__main__":
    sys.exit(main())
