"""The room service: a JupyterHub-managed service that stores what learners' kernels send and serves
the instructor's page.

It has no passwords of its own. A kernel posts with its server's ``JUPYTERHUB_API_TOKEN``; a browser
comes with the hub's OAuth cookie; either way the hub names the user, so a learner can only write
as themself. The instructor (named in ``SHAPELAB_ROOM_INSTRUCTORS``; no hub admin) sees the room and
the session report (``report.html``, ``report.csv``) and opens a second vote on a prompt (``api/round``);
their own kernel's reveals are the prompts' reference (``learning``); a learner sees only their own records,
and only the instructor can remove a learner's records.

A record is taken only when it names a lesson's prompt or a lab's exercise of the course's manifest
(``manifest``), or an item of the course's concept inventory (``labkit.inventory``) on its form, and at most at
a per-learner rate (a token bucket: a burst larger than two Run All of the biggest notebook or inventory form,
then ``PER_MINUTE``); anything else is a 400 (or 429) with a one-line reason. ``api/form`` tells a learner's
kernel which inventory form to take first (the store assigns it once, counterbalanced).

    SHAPELAB_ROOM_DB=sqlite:////srv/shapelab/room.sqlite python -m shapelab.room.service   (the hub starts it)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import time
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import httpclient, ioloop, web

from . import learning
from . import manifest as course
from . import report
from .page import PAGE
from .store import Store

INSTRUCTORS_ENV = "SHAPELAB_ROOM_INSTRUCTORS"
DB_ENV = "SHAPELAB_ROOM_DB"  # the store's URL, from the environment: a command line is readable by everyone
MAX_BODY = 4096  # bytes: a record is a few hundred; anything longer is not a record
TEXT = 200
ID = re.compile(r"[0-9a-f]{32}")
PER_MINUTE = 60  # records a learner may send a minute once the burst is spent

# each kind's fields and their types: a record must have exactly these (None: a prediction left as ...)
FIELDS = {
    "reveal": {"id": (str,), "lesson": (str,), "prompt": (str,), "predicted": (str, type(None)), "measured": (str,),
               "agreed": (bool, type(None))},
    "check": {"id": (str,), "lab": (str,), "exercise": (str,), "passed": (bool,), "attempt": (int,)},
    # choice null: the kernel showed the learner this item's key (answers to it after that are "after seeing")
    "inventory": {"id": (str,), "form": (str,), "item": (str,), "phase": (str,), "choice": (str, type(None))},
}
CHOICES = ("a", "b", "c", "d", "e")  # four options and "I don't know"


def validate(kind: str, body: bytes, manifest: course.Manifest, bank=None) -> dict:
    """The record in ``body``, or ValueError saying in one line what is wrong with it."""
    if len(body) > MAX_BODY:
        raise ValueError(f"payload of {len(body)} bytes; at most {MAX_BODY}")
    try:
        record = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nested deeper than a record is
        raise ValueError("payload is not a JSON record") from None
    fields = FIELDS[kind]
    if not isinstance(record, dict) or set(record) != set(fields):
        got = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"a {kind} has exactly the fields {sorted(fields)}; got {got}"[:300])
    for name, types in fields.items():
        value = record[name]
        if type(value) not in types:  # bool is an int in Python; neither may stand for the other here
            raise ValueError(f"{name} must be {' or '.join('null' if t is type(None) else t.__name__ for t in types)}")
        if isinstance(value, str):
            if not 0 < len(value) <= TEXT:
                raise ValueError(f"{name} must be 1 to {TEXT} characters")
            if any(ord(c) < 32 and c not in "\t\r\n" for c in value):  # NUL first: PostgreSQL refuses it
                raise ValueError(f"{name} holds a control character (NUL or the like)")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate, from a JSON escape such as \\ud800
                raise ValueError(f"{name} is not UTF-8 text") from None
    if not ID.fullmatch(record["id"]):
        raise ValueError("id must be 32 hex digits")
    if kind == "reveal":
        if (record["predicted"] is None) != (record["agreed"] is None):
            raise ValueError("predicted and agreed are both null (left unanswered) or neither")
        if manifest.lesson(record["lesson"]) is None:
            raise ValueError(f"no lesson {record['lesson']!r} in the course")
        if manifest.prompt(record["lesson"], record["prompt"]) is None:
            raise ValueError(f"no prompt {record['prompt']!r} in lesson {record['lesson']}")
    elif kind == "inventory":
        item = bank.item(record["item"]) if bank is not None else None
        if item is None:
            raise ValueError(f"no item {record['item']!r} in the course's concept inventory")
        if record["form"] != item.form:
            raise ValueError(f"item {item.id} is on form {item.form}, not {record['form']!r}")
        if record["phase"] not in ("pre", "post"):
            raise ValueError("phase must be pre or post")
        if record["choice"] is not None and record["choice"] not in CHOICES:
            raise ValueError(f"choice must be one of {', '.join(CHOICES)} (or null: the key was shown)")
    else:
        if not 1 <= record["attempt"] <= 10**6:
            raise ValueError("attempt must be a positive count")
        lab = manifest.lab(record["lab"])
        if lab is None:
            raise ValueError(f"no lab {record['lab']!r} in the course")
        if record["exercise"] not in lab.exercises:
            raise ValueError(f"no exercise {record['exercise']!r} in {lab.title}")
    return record


class RateLimit:
    """A token bucket per learner: ``burst`` records at once, then ``per_minute``."""

    def __init__(self, burst: int, per_minute: float):
        self.burst, self.rate = burst, per_minute / 60
        self.buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, when counted)

    def take(self, user: str, now: float | None = None) -> float:
        """0 when ``user`` may send one more record now (one token taken), else the seconds until they may."""
        now = time.monotonic() if now is None else now
        tokens, then = self.buckets.get(user, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens >= 1:
            self.buckets[user] = (tokens - 1, now)
            return 0.0
        self.buckets[user] = (tokens, now)
        return (1 - tokens) / self.rate


class RoomHandler(HubOAuthenticated, web.RequestHandler):
    """Every page and endpoint of the room: the hub names the user, or the answer is 403."""

    async def prepare(self):
        """Ask the hub who is calling without holding up other requests (``current_user`` then reads
        the answer): forty kernels' first records would otherwise wait on each other's lookups."""
        model = await self.hub_auth.get_user(self, sync=False)
        try:
            self._hub_auth_user_cache = self.check_hub_user(model) if model else None
        except UserNotAllowed:
            self._hub_auth_user_cache = None

    @property
    def store(self) -> Store:
        return self.settings["store"]

    def user(self) -> str:
        model = self.current_user
        if not model or model.get("kind", "user") != "user":
            raise web.HTTPError(403, "log in to the hub as a user of this room")
        return model["name"]

    def instructor(self) -> str:
        name = self.user()
        if name not in self.settings["instructors"]:
            raise web.HTTPError(403, "only the instructor sees the room")
        return name

    def records_of(self, name: str) -> dict:
        """Everything ``name`` sent, as the API answers it."""
        return {"user": name, "reveals": self.store.records("reveal", name), "checks": self.store.records("check", name),
                "inventory": self.store.records("inventory", name)}

    def write_error(self, status_code, **kwargs):
        reason = kwargs.get("exc_info", (None, None))[1]
        message = getattr(reason, "log_message", None) or self._reason
        if status_code == 429:
            self.set_header("Retry-After", str(self.retry_after))
        self.finish({"error": message, "status": status_code})


class RecordHandler(RoomHandler):
    async def post(self, kind):
        user = self.user()
        limit = self.settings["limit"]
        wait = limit.take(user)  # a refused payload costs a token too: a flood is a flood
        if wait:
            self.retry_after = math.ceil(wait)  # write_error sends it: send_error clears the headers set here
            raise web.HTTPError(429, f"more than {limit.burst} records at once or {PER_MINUTE} a minute from one "
                                     f"learner; the next is taken in {math.ceil(wait)} s")
        try:
            record = validate(kind, self.request.body, self.settings["manifest"], self.settings["bank"])
        except ValueError as e:
            raise web.HTTPError(400, str(e)) from None
        stored = self.store.add(kind, user, record)  # committed before we answer
        self.set_status(201 if stored else 200)
        # the round the store counted a reveal in: the kernel says so when it is the second vote
        self.finish({"stored": stored, "id": record["id"]} |
                    ({"round": self.store.round_of(record["id"])} if kind == "reveal" else {}))


class FormHandler(RoomHandler):
    def get(self):
        """The inventory form this learner takes before the lessons, and the one after (the store assigns it at the
        first ask and keeps it: half the room A then B, half B then A)."""
        user = self.user()
        if self.settings["bank"] is None:
            raise web.HTTPError(404, "this course has no concept inventory")
        first = self.store.assign_form(user)
        self.finish({"user": user, "form": first, "pre": first, "post": "B" if first == "A" else "A"})


class MineHandler(RoomHandler):
    def get(self):
        self.finish(self.records_of(self.user()))


class UserRecordsHandler(RoomHandler):
    def get(self, name):
        user = self.user()
        if name != user:
            self.instructor()
        self.finish(self.records_of(name))


class RemoveHandler(RoomHandler):
    def post(self, name):
        """Remove every record of ``name`` (the instructor only; a browser's POST carries the hub's XSRF token)."""
        by = self.instructor()
        self.finish({"user": name, "removed": self.store.remove(name, by)})


class RoomSummaryHandler(RoomHandler):
    async def get(self):
        self.instructor()
        names, basis = await self.settings["roster"].learners()
        self.finish(self.store.room(self.settings["manifest"], names, basis, instructors=self.settings["instructors"],
                                    bank=self.settings["bank"]))


class ExportHandler(RoomHandler):
    def get(self):
        self.instructor()
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="room-{time.strftime("%Y%m%d-%H%M")}.csv"')
        self.finish(self.store.export_csv())


class ReportHandler(RoomHandler):
    def get(self, kind):
        """The session report (``report``): the page the instructor keeps, or its CSV."""
        self.instructor()
        summary = report.sessions(self.settings["manifest"], self.store, self.settings["bank"])
        if kind == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", f'attachment; filename="room-report-{time.strftime("%Y%m%d")}.csv"')
            self.finish(report.to_csv(summary))
        else:
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")  # no script runs
            self.finish(report.to_html(summary))


class RoundHandler(RoomHandler):
    def post(self):
        """Open the second vote on one prompt of the course (the instructor only): the reveals of that prompt
        sent from now on are round 2. The body names it: {"lesson": ..., "prompt": the reveal's line}."""
        by = self.instructor()
        try:
            body = json.loads(self.request.body)
            lesson, prompt = body["lesson"], body["prompt"]
        except (ValueError, KeyError, TypeError):
            raise web.HTTPError(400, 'the body is {"lesson": ..., "prompt": ...}') from None
        if not isinstance(lesson, str) or not isinstance(prompt, str) or \
                self.settings["manifest"].prompt(lesson, prompt) is None:
            raise web.HTTPError(400, "no such prompt in the course")
        opened = self.store.open_round(lesson, prompt, by)
        if opened is None:
            raise web.HTTPError(409, "the second vote on this prompt is open already")
        self.finish({"lesson": lesson, "prompt": prompt, "round": opened})


class PageHandler(RoomHandler):
    @web.authenticated  # a browser without the hub's cookie is sent through the hub's login
    def get(self):
        self.instructor()
        self.set_header("Content-Type", "text/html; charset=utf-8")
        # the page's own requests carry the hub's XSRF token: cookie-authenticated fetches need it
        token = self.xsrf_token
        self.finish(self.settings["page"].replace("{{xsrf}}", token.decode() if isinstance(token, bytes) else token))


class Roster:
    """The hub's users who are not instructors, asked of the hub at most every 10 s: those with a server
    running, when the service's token may read servers (scope read:servers), else everyone on the roster."""

    def __init__(self, instructors):
        self.instructors = set(instructors)
        self.answer: tuple[list[str], str] = ([], "the hub's roster, and anyone with a record")
        self.at = 0.0

    async def learners(self) -> tuple[list[str], str]:
        """(names, who they are, in words)."""
        if time.time() - self.at > 10:
            try:
                users = [u for u in await self._users() if u["name"] not in self.instructors]
                if all("servers" in u for u in users):
                    self.answer = ([u["name"] for u in users if u["servers"]],
                                   f"those with a server running, and anyone with a record ({len(users)} on the hub's roster)")
                else:
                    self.answer = ([u["name"] for u in users], "the hub's roster, and anyone with a record")
            except Exception:  # the page still shows whoever sent something
                pass
            self.at = time.time()
        return self.answer

    async def _users(self) -> list[dict]:
        """Every user, page by page (the hub answers at most 200 at a time)."""
        api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
        users: list[dict] = []
        while True:
            response = await httpclient.AsyncHTTPClient().fetch(
                f"{api}/users?offset={len(users)}&limit=200", headers={"Authorization": f"token {token}"},
                request_timeout=3)
            page = json.loads(response.body)
            users += page
            if len(page) < 200:
                return users


def make_app(db: str, instructors: list[str], prefix: str = "/services/room/", manifest: course.Manifest | None = None,
             roster=None, bank=None) -> web.Application:
    """The service's tornado application over the store at ``db``, the course's ``manifest`` and its concept
    inventory's item ``bank`` (by default ``labkit.inventory``, the course's)."""
    store = Store(db, instructors)
    manifest = manifest or course.load()
    bank = bank or learning.course_bank()
    per_run = max(manifest.records_per_run(), max(len(bank.items(f)) for f in "AB") if bank else 0)
    return web.Application([
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
        (prefix + r"api/(reveal|check|inventory)", RecordHandler),
        (prefix + "api/form", FormHandler),
        (prefix + "api/mine", MineHandler),
        (prefix + r"api/records/([^/]+)", UserRecordsHandler),
        (prefix + r"api/remove/([^/]+)", RemoveHandler),
        (prefix + "api/room", RoomSummaryHandler),
        (prefix + "export.csv", ExportHandler),
        (prefix + r"report\.(html|csv)", ReportHandler),
        (prefix + "api/round", RoundHandler),
        (prefix + "?", PageHandler),
    ], store=store, manifest=manifest, bank=bank, instructors=set(instructors), roster=roster or Roster(instructors),
        limit=RateLimit(burst=2 * per_run + 10, per_minute=PER_MINUTE), page=PAGE,
        cookie_secret=_cookie_secret())


def _cookie_secret() -> bytes:
    """Stable while the hub runs (derived from the token it gave this service), so a restarted service
    still knows the instructor's cookie; a fresh one when there is no hub."""
    token = os.environ.get("JUPYTERHUB_API_TOKEN") or os.urandom(32).hex()
    return hashlib.sha256(f"shapelab-room-cookie:{token}".encode()).digest()


def main(argv=None) -> None:
    """Run the service where the hub says (JUPYTERHUB_SERVICE_URL and _PREFIX)."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=os.environ.get(DB_ENV),
                        help=f"SQLAlchemy URL: sqlite:////path/room.sqlite or postgresql://... (default: ${DB_ENV}, "
                             "which keeps a password off the command line)")
    args = parser.parse_args(argv)
    if not args.db:
        parser.error(f"no store: set {DB_ENV} (or --db)")
    instructors = [n for n in os.environ.get(INSTRUCTORS_ENV, "").split(",") if n]
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/room/")
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    app = make_app(args.db, instructors, prefix)
    app.listen(url.port, url.hostname, max_body_size=64 * 1024)
    print(f"room service on {url.geturl()}{prefix} (store: {app.settings['store'].engine.url!r}, "  # password hidden
          f"manifest: {len(app.settings['manifest'].lessons)} lessons, {len(app.settings['manifest'].labs)} labs, "
          f"instructors: {', '.join(instructors) or 'none'})", flush=True)
    try:
        ioloop.IOLoop.current().start()
    except KeyboardInterrupt:  # the hub stops its services with SIGINT: a stop, not an error to print
        pass


if __name__ == "__main__":
    main()
