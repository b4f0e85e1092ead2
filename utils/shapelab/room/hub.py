"""The hub's configuration for a room on one machine: JupyterHub with its proxy, a login code per name
(``logins``), one OS user per learner, each learner's server on an origin of its own, the instructor
with only the rights the room needs, the room service and the idle culler.

A learner controls their own server (its extensions, its pages), so nothing of it may run with the
instructor's rights: each server is served from its own host name (``subdomain_host``: the learner
``ann`` at ``ann.DOMAIN``, the room's page at ``room--service.DOMAIN``, the hub at ``DOMAIN``), so a
page of a learner's server is another origin than the hub and the room and reads neither; and the
instructor is no hub admin but holds the role ``INSTRUCTOR_SCOPES`` names, without access to any
learner's server, so the hub refuses to log them into one.

``Room`` holds the choices (the command fills it from its options); ``write_config`` saves them
beside a two-line ``jupyterhub_config.py`` that hands them to ``configure``, so what the hub runs
can be read in one file and the tests run the same configuration with one service added.
"""
from __future__ import annotations

import json
import os
import pwd
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import accounts, logins

LANDING = "/lab/tree/notebooks/00_orientation.ipynb"
SERVICE = "room"
READY = "ready"       # beside the learners' course: made once their course and Python are (tools.room)
READY_TIMEOUT = 300   # seconds a first server start may wait for them
PASSWORDS, CODES, SHEET = "passwords.dbm", "login-codes.json", "login-codes.txt"  # in the room's state, root's
# the instructor's role: the room's page, and the hub's list of users and their servers (/hub/admin),
# with stopping a stuck server; never access to a learner's server, never a change to any user
INSTRUCTOR_SCOPES = [f"access:services!service={SERVICE}", "admin-ui", "list:users", "read:users:name",
                     "read:users:activity", "read:servers", "delete:servers"]


@dataclass
class Room:
    course: str                       # what learners get of the course (accounts.course_copy): labs/, notebooks/
    state: str                        # the room's own files: databases, passwords, cookie secret, warmed cache
    homes: str                        # learners' homes are made under it
    instructor: str = "instructor"    # the only one who sees the room's page (INSTRUCTOR_SCOPES, no hub admin)
    learners: list[str] | None = None  # the roster; None: anyone may sign up on first login
    ip: str = ""                      # "" listens on every interface
    domain: str = "localhost"         # the hub's host name; each learner's server at NAME.domain (wildcard DNS)
    port: int = 8000                  # the hub's public port, behind its proxy
    proxy_api_port: int = 8001        # the proxy's own API (loopback)
    hub_port: int = 8081              # the hub's API, where servers and services reach it (loopback)
    service_port: int = 10101         # the room service (loopback)
    db: str = ""                      # the room service's store (default: SQLite in state)
    idle_timeout: int = 3600          # seconds before an idle server is stopped
    mem_limit: str = "2G"             # per learner (advisory with LocalProcessSpawner; see INSTRUCTOR.md)
    cpu_limit: float = 1.0
    threads: int = 1                  # OMP_NUM_THREADS in each learner's kernel
    python: str = sys.executable      # the course's environment (the hub and the room service run it)
    learner_python: str = ""          # what learners' servers run (accounts.learner_python); default: python
    ssl_cert: str = ""
    ssl_key: str = ""
    extra_env: dict = field(default_factory=dict)

    @property
    def store_url(self) -> str:
        return self.db or f"sqlite:///{Path(self.state) / 'room.sqlite'}"

    @property
    def hub_url(self) -> str:
        """Where browsers reach the hub (learners' servers and the room's page are on subdomains of it)."""
        return f"{'https' if self.ssl_cert else 'http'}://{self.domain}:{self.port}"

    @property
    def page_url(self) -> str:
        """The instructor's page, on the room service's own host name (room--service.DOMAIN)."""
        from jupyterhub.utils import subdomain_hook_idna  # the hub's default naming of a service's host

        scheme = "https" if self.ssl_cert else "http"
        return f"{scheme}://{subdomain_hook_idna(SERVICE, self.domain, 'service')}:{self.port}/services/{SERVICE}/"

    @property
    def cache(self) -> Path:
        return Path(self.state) / "inductor-cache"


def write_config(room: Room, extra: str = "") -> Path:
    """Write ``room.json`` and ``jupyterhub_config.py`` into the room's state folder, and issue a login code
    to each name that has no password yet (``logins``, the slips in ``SHEET``); return the config's path."""
    state = Path(room.state)
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o700)  # passwords, secrets and the store are root's alone
    codes = logins.issue([*(room.learners or []), room.instructor], str(state / PASSWORDS), state / CODES)
    _write_private(state / SHEET, logins.sheet(codes, room.hub_url, room.instructor))
    _write_private(state / "room.json", json.dumps(asdict(room), indent=1))
    config = state / "jupyterhub_config.py"
    _write_private(config, "from shapelab.room.hub import configure, load\n"
                           f"configure(c, load({str(state / 'room.json')!r}))\n" + extra)
    return config


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (it may hold the store's password or a token)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def load(path) -> Room:
    """The room saved by ``write_config``."""
    return Room(**json.loads(Path(path).read_text()))


def configure(c, room: Room) -> None:
    """Set every option of the hub ``c`` (a traitlets config) for ``room``."""
    state = Path(room.state)
    c.JupyterHub.ip, c.JupyterHub.port = room.ip, room.port
    c.JupyterHub.hub_ip, c.JupyterHub.hub_port = "127.0.0.1", room.hub_port
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{room.proxy_api_port}"
    c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
    c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
    c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
    c.JupyterHub.cleanup_servers = c.JupyterHub.cleanup_proxy = True  # a stopped hub leaves nothing running
    if room.ssl_cert:
        c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = room.ssl_cert, room.ssl_key

    # each learner's server, and the room service, on a host name of its own: another origin than the hub's
    c.JupyterHub.subdomain_host = room.hub_url

    # passwords as The Littlest JupyterHub keeps them, but every known name's first one is a code the
    # room issued (write_config): nobody can claim a roster name or the instructor's before its owner does
    c.JupyterHub.authenticator_class = "firstuseauthenticator.FirstUseAuthenticator"
    c.FirstUseAuthenticator.dbm_path = str(state / PASSWORDS)
    c.FirstUseAuthenticator.create_users = room.learners is None
    if room.learners is not None:
        c.Authenticator.allowed_users = set(room.learners) | {room.instructor}
    else:
        c.Authenticator.allow_all = True

    # each learner a separate OS user, their server started as them in their own home
    c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
    c.Spawner.cmd = [room.learner_python or room.python, "-m", "jupyterhub.singleuser"]
    c.Spawner.default_url = LANDING
    c.Spawner.notebook_dir = "~"
    c.Spawner.mem_limit, c.Spawner.cpu_limit = room.mem_limit, room.cpu_limit
    c.LocalProcessSpawner.popen_kwargs = {"umask": 0o077}  # what a learner's server and kernels write is theirs alone
    c.Spawner.http_timeout = c.Spawner.start_timeout = 120
    prefix = f"/services/{SERVICE}"
    c.Spawner.environment = {
        "SHAPELAB_ROOM_URL": f"http://127.0.0.1:{room.service_port}{prefix}",
        "TORCHINDUCTOR_CACHE_DIR": lambda spawner: str(Path(pwd.getpwnam(spawner.user.name).pw_dir) / accounts.CACHE),
        "OMP_NUM_THREADS": str(room.threads),
        **room.extra_env,
    }
    # the kernel's token may post to the room service as its own user, and nothing more than before
    c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", f"access:services!service={SERVICE}"]

    ready = Path(room.course).parent / READY

    async def furnish(spawner):
        import asyncio

        if spawner.user.name == room.instructor:  # no OS user, home or server for them: their page is the room's
            from tornado import web

            raise web.HTTPError(403, f"the instructor has no server in the room; the room's page is {room.page_url}")
        for _ in range(2 * READY_TIMEOUT):  # the hub opens while the room command makes the learners' Python
            if ready.exists():
                break
            await asyncio.sleep(0.5)
        else:
            raise RuntimeError(f"the learners' course and Python are not ready ({ready} is missing)")
        user = accounts.ensure_user(spawner.user.name, Path(room.homes))
        accounts.furnish(user, Path(room.course), room.cache)

    c.Spawner.pre_spawn_hook = furnish
    # after login the instructor lands on the room's page (their server is never started); a learner on theirs
    c.JupyterHub.default_url = lambda handler: (
        room.page_url if handler.current_user is not None and handler.current_user.name == room.instructor else "")

    # JupyterHub restarts a managed service when its poll sees it gone; that poll (every 30 s) takes no
    # config, so a crashed room service would be away for half a minute: look every 3 s instead. Stopping,
    # the hub gives each service in turn 10 s to leave on SIGINT before SIGTERM; in CI runs both services
    # waited that out, past the room's STOP_TIMEOUT (60 s lost in one test): 1 s each instead
    from jupyterhub.services import service as hub_services
    if hasattr(hub_services, "_ServiceSpawner"):
        hub_services._ServiceSpawner.poll_interval = 3
        hub_services._ServiceSpawner.interrupt_timeout = 1
    # the hub's minutely health check of services only logs; it also fires while the hub stops and prints a
    # traceback when its service was just cleaned up (JupyterHub 6.1): the poll above is what restarts one
    c.JupyterHub.service_check_interval = 0

    python = room.python
    c.JupyterHub.services = [
        {"name": SERVICE, "url": f"http://127.0.0.1:{room.service_port}", "oauth_no_confirm": True,
         "command": [python, "-m", "shapelab.room.service"],  # the store's URL may hold a password: not in argv
         "environment": {"SHAPELAB_ROOM_INSTRUCTORS": room.instructor, "SHAPELAB_ROOM_DB": room.store_url},
         "display": True},
        {"name": "idle-culler",
         "command": [python, "-m", "jupyterhub_idle_culler", f"--timeout={room.idle_timeout}", "--cull-every=300"]},
    ]
    c.JupyterHub.load_roles = [
        {"name": "user", "scopes": ["self", f"access:services!service={SERVICE}"]},
        {"name": "instructor", "users": [room.instructor], "scopes": INSTRUCTOR_SCOPES},
        {"name": "admin", "users": []},  # nobody, also where an older room's database made the instructor one
        {"name": "room-service", "services": [SERVICE], "scopes": ["list:users", "read:users:name", "read:servers"]},
        {"name": "idle-culler", "services": ["idle-culler"],
         "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
    ]
