"""The room service: a JupyterHub-managed service that stores what learners' kernels send and serves
the instructor's page.

It has no passwords of its own. A kernel posts with its server's ``JUPYTERHUB_API_TOKEN``; a browser
comes with the hub's OAuth cookie; either way the hub names the user, so a learner can only write
as themself. The instructor (the hub's admin, named in ``SHAPELAB_ROOM_INSTRUCTORS``) sees the room;
a learner sees only their own records.

    python -m shapelab.room.service --db sqlite:////srv/shapelab/room.sqlite   (the hub starts it)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import time
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from tornado import httpclient, ioloop, web

from .page import PAGE
from .store import Store

INSTRUCTORS_ENV = "SHAPELAB_ROOM_INSTRUCTORS"
MAX_BODY = 4096  # bytes: a record is a few hundred; anything longer is not a record
TEXT = 200
ID = re.compile(r"[0-9a-f]{32}")

# each kind's fields and their types: a record must have exactly these
FIELDS = {
    "reveal": {"id": str, "lesson": str, "prompt": str, "predicted": str, "measured": str, "agreed": bool},
    "check": {"id": str, "lab": str, "exercise": str, "passed": bool, "attempt": int},
}


def validate(kind: str, body: bytes) -> dict:
    """The record in ``body``, or ValueError saying what is wrong with it."""
    if len(body) > MAX_BODY:
        raise ValueError(f"payload of {len(body)} bytes; at most {MAX_BODY}")
    try:
        record = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("payload is not JSON") from None
    fields = FIELDS[kind]
    if not isinstance(record, dict) or set(record) != set(fields):
        got = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise ValueError(f"a {kind} has exactly the fields {sorted(fields)}; got {got}")
    for name, typ in fields.items():
        value = record[name]
        if type(value) is not typ:  # bool is an int in Python; neither may stand for the other here
            raise ValueError(f"{name} must be {typ.__name__}")
        if typ is str and not (0 < len(value) <= TEXT):
            raise ValueError(f"{name} must be 1 to {TEXT} characters")
    if not ID.fullmatch(record["id"]):
        raise ValueError("id must be 32 hex digits")
    if kind == "check" and not 1 <= record["attempt"] <= 10**6:
        raise ValueError("attempt must be a positive count")
    return record


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
        return {"user": name, "reveals": self.store.records("reveal", name), "checks": self.store.records("check", name)}

    def write_error(self, status_code, **kwargs):
        reason = kwargs.get("exc_info", (None, None))[1]
        message = getattr(reason, "log_message", None) or self._reason
        self.finish({"error": message, "status": status_code})


class RecordHandler(RoomHandler):
    async def post(self, kind):
        user = self.user()
        try:
            record = validate(kind, self.request.body)
        except ValueError as e:
            raise web.HTTPError(400, str(e)) from None
        stored = self.store.add(kind, user, record)  # committed before we answer
        self.set_status(201 if stored else 200)
        self.finish({"stored": stored, "id": record["id"]})


class MineHandler(RoomHandler):
    def get(self):
        self.finish(self.records_of(self.user()))


class UserRecordsHandler(RoomHandler):
    def get(self, name):
        user = self.user()
        if name != user:
            self.instructor()
        self.finish(self.records_of(name))


class RoomSummaryHandler(RoomHandler):
    async def get(self):
        self.instructor()
        learners = await self.settings["roster"].learners()
        self.finish(self.store.room(learners))


class ExportHandler(RoomHandler):
    def get(self):
        self.instructor()
        self.set_header("Content-Type", "text/csv; charset=utf-8")
        self.set_header("Content-Disposition", f'attachment; filename="room-{time.strftime("%Y%m%d-%H%M")}.csv"')
        self.finish(self.store.export_csv())


class PageHandler(RoomHandler):
    @web.authenticated  # a browser without the hub's cookie is sent through the hub's login
    def get(self):
        self.instructor()
        self.set_header("Content-Type", "text/html; charset=utf-8")
        # the page's own requests carry the hub's XSRF token: cookie-authenticated fetches need it
        token = self.xsrf_token
        self.finish(self.settings["page"].replace("{{xsrf}}", token.decode() if isinstance(token, bytes) else token))


class Roster:
    """The hub's users who are not instructors, asked of the hub at most every 10 s."""

    def __init__(self, instructors):
        self.instructors = set(instructors)
        self.names: list[str] = []
        self.at = 0.0

    async def learners(self) -> list[str]:
        if time.time() - self.at > 10:
            api, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
            try:
                response = await httpclient.AsyncHTTPClient().fetch(
                    f"{api}/users", headers={"Authorization": f"token {token}"}, request_timeout=3)
                self.names = [u["name"] for u in json.loads(response.body) if u["name"] not in self.instructors]
            except Exception:  # the page still shows whoever sent something
                pass
            self.at = time.time()
        return self.names


def make_app(db: str, instructors: list[str], prefix: str = "/services/room/") -> web.Application:
    """The service's tornado application over the store at ``db``."""
    store = Store(db)
    return web.Application([
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
        (prefix + r"api/(reveal|check)", RecordHandler),
        (prefix + "api/mine", MineHandler),
        (prefix + r"api/records/([^/]+)", UserRecordsHandler),
        (prefix + "api/room", RoomSummaryHandler),
        (prefix + "export.csv", ExportHandler),
        (prefix + "?", PageHandler),
    ], store=store, instructors=set(instructors), roster=Roster(instructors), page=PAGE,
        cookie_secret=_cookie_secret())


def _cookie_secret() -> bytes:
    """Stable while the hub runs (derived from the token it gave this service), so a restarted service
    still knows the instructor's cookie; a fresh one when there is no hub."""
    token = os.environ.get("JUPYTERHUB_API_TOKEN") or os.urandom(32).hex()
    return hashlib.sha256(f"shapelab-room-cookie:{token}".encode()).digest()


def main(argv=None) -> None:
    """Run the service where the hub says (JUPYTERHUB_SERVICE_URL and _PREFIX)."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="SQLAlchemy URL: sqlite:////path/room.sqlite or postgresql://...")
    args = parser.parse_args(argv)
    instructors = [n for n in os.environ.get(INSTRUCTORS_ENV, "").split(",") if n]
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/room/")
    url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
    app = make_app(args.db, instructors, prefix)
    app.listen(url.port, url.hostname, max_body_size=64 * 1024)
    print(f"room service on {url.geturl()}{prefix} (store: {app.settings['store'].engine.url!r}, "
          f"instructors: {', '.join(instructors) or 'none'})", flush=True)
    ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
