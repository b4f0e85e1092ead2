"""The room's store: every revealed prediction, lab check and concept-inventory answer a learner's kernel sent,
once each, and the inventory form the room assigned each learner.

SQLite by default (one file, WAL, every commit synced before the service answers, so a restart
loses nothing acknowledged); a PostgreSQL URL (``postgresql://...``, driver installed separately)
for a hub on several machines. The same SQLAlchemy Core statements serve both. The schema is
versioned: ``MIGRATIONS`` lists the steps in order and ``Store`` applies the missing ones at start.

``Store.room`` is what the instructor's page shows, read against the course's manifest by ``learning``'s rule.
It reads the latest session's records from the database once and keeps them in memory, adding each record
as ``add`` stores it (the service is the store's one writer), so the page's refresh every 2 s costs no read of
the whole store; the summary itself is kept until a record changes it or 2 s pass.
"""
from __future__ import annotations

import bisect
import csv
import io
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import sqlalchemy as sa

from . import learning

metadata = sa.MetaData()

schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))

reveals = sa.Table(
    "reveals", metadata,
    sa.Column("id", sa.String(32), primary_key=True),  # chosen by the kernel: a resent record is stored once
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("lesson", sa.String(200), nullable=False),
    sa.Column("prompt", sa.String(200), nullable=False),
    sa.Column("predicted", sa.String(200), nullable=False),
    sa.Column("measured", sa.String(200), nullable=False),
    sa.Column("agreed", sa.Boolean, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("answered", sa.Boolean, nullable=False, server_default=sa.true()),  # False: left as ``...`` (v3)
    sa.Column("round", sa.Integer, nullable=False, server_default="1"),  # 2: sent after a second vote opened (v4)
    sa.Column("instructor_run", sa.Boolean, nullable=False, server_default=sa.false()),  # an instructor's own run (v5)
)

checks = sa.Table(
    "checks", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("lab", sa.String(200), nullable=False),
    sa.Column("exercise", sa.String(200), nullable=False),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

removals = sa.Table(  # who removed whose records, when, and how many (v3)
    "removals", metadata,
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("removed_by", sa.String(255), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("reveals", sa.Integer, nullable=False),
    sa.Column("checks", sa.Integer, nullable=False),
    sa.Column("inventory", sa.Integer, nullable=False, server_default="0"),  # (v5)
)

rounds = sa.Table(  # a prompt's second vote (Peer Instruction), opened by the instructor (v4)
    "rounds", metadata,
    sa.Column("lesson", sa.String(200), nullable=False),
    sa.Column("prompt", sa.String(200), nullable=False),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("opened_by", sa.String(255), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

inventory = sa.Table(  # a concept-inventory answer; choice NULL: the item's key was shown to the learner (v5)
    "inventory", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("form", sa.String(8), nullable=False),
    sa.Column("item", sa.String(64), nullable=False),
    sa.Column("phase", sa.String(8), nullable=False),
    sa.Column("choice", sa.String(8), nullable=True),
    sa.Column("at", sa.Float, nullable=False),
)

forms = sa.Table(  # the inventory form each learner takes before the lessons (the other one after), v5
    "forms", metadata,
    sa.Column("user", sa.String(255), primary_key=True),
    sa.Column("first", sa.String(8), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

by_prompt = sa.Index("reveals_by_prompt", reveals.c.lesson, reveals.c.prompt)
by_exercise = sa.Index("checks_by_exercise", checks.c.lab, checks.c.exercise)


def _v1(conn):
    """The records themselves, as version 1 had them."""
    for table in (reveals, checks):
        v1 = sa.Table(table.name, sa.MetaData(), *[sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
                                                    for c in table.columns if c.name not in ("answered", "round", "instructor_run")])
        conn.execute(sa.schema.CreateTable(v1))  # the table alone: its indexes belong to _v2


def _v2(conn):
    """Indexes for the instructor's page, which groups by prompt and by exercise."""
    by_prompt.create(conn)
    by_exercise.create(conn)


def _v3(conn):
    """A reveal left unanswered (``predicted = ...``) is recorded too; the instructor's removals are kept."""
    conn.execute(sa.text("ALTER TABLE reveals ADD COLUMN answered BOOLEAN NOT NULL DEFAULT TRUE"))
    v3 = sa.Table("removals", sa.MetaData(), *[sa.Column(c.name, c.type, nullable=c.nullable)
                                                for c in removals.columns if c.name != "inventory"])
    conn.execute(sa.schema.CreateTable(v3))


def _v4(conn):
    """A second vote on a prompt: the rounds opened, and each reveal's round."""
    conn.execute(sa.text('ALTER TABLE reveals ADD COLUMN "round" INTEGER NOT NULL DEFAULT 1'))
    conn.execute(sa.schema.CreateTable(rounds))


def _v5(conn):
    """The concept inventory: its answers, the forms assigned, and removals that count them; a reveal the
    instructor's own kernel sent is the prompt's reference."""
    conn.execute(sa.text("ALTER TABLE reveals ADD COLUMN instructor_run BOOLEAN NOT NULL DEFAULT FALSE"))
    conn.execute(sa.schema.CreateTable(inventory))
    conn.execute(sa.schema.CreateTable(forms))
    conn.execute(sa.text("ALTER TABLE removals ADD COLUMN inventory INTEGER NOT NULL DEFAULT 0"))


MIGRATIONS = [_v1, _v2, _v3, _v4, _v5]  # MIGRATIONS[i] takes the schema from version i to i + 1
VERSION = len(MIGRATIONS)
KINDS = {"reveal": reveals, "check": checks, "inventory": inventory}
FORMS = ("A", "B")
CACHE_SECONDS = 2.0  # the page asks every 2 s: two tabs open share one summary
QUICK = 0.05  # seconds: an inventory summary computed faster than this is computed again at once


class NewerSchema(RuntimeError):
    """The database was written by a newer room than this one."""


def connect(url: str) -> sa.Engine:
    """An engine for ``url``; SQLite gets WAL and synchronous commits."""
    engine = sa.create_engine(url)
    if engine.dialect.name == "sqlite":
        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA busy_timeout=5000")
            cur.close()
    return engine


def migrate(engine: sa.Engine, to: int = VERSION) -> int:
    """Apply the missing migrations up to ``to``, each in one transaction; return the version before."""
    with engine.begin() as conn:
        schema_version.create(conn, checkfirst=True)
        row = conn.execute(sa.select(schema_version.c.version)).first()
        if row is None:
            conn.execute(schema_version.insert().values(version=0))
        start = row.version if row else 0
    if start > VERSION:
        raise NewerSchema(f"the room's database is at schema version {start}; this room knows up to {VERSION}: "
                          "upgrade shapelab or point --db at a new database")
    for version in range(start, to):
        with engine.begin() as conn:
            MIGRATIONS[version](conn)
            conn.execute(schema_version.update().values(version=version + 1))
    return start


class Store:
    """Records in, summaries out. ``add`` returns only after the record is committed."""

    def __init__(self, url: str, instructors=()):
        self.instructors = set(instructors)  # their reveals are stored as the prompts' reference
        self.engine = connect(url)
        migrate(self.engine)
        self._session: dict | None = None  # the latest session's records per kind, read once (``_latest``)
        self._summary: tuple | None = None  # (what it was computed from, when, the summary)
        self._inventory: tuple | None = None  # the same for the inventory's part
        self._refs: dict | None = None  # the instructor's runs of each prompt, every session (``references``)
        self._pool: ThreadPoolExecutor | None = None  # computes the inventory's summary when it is slow
        self._computing: Future | None = None
        self.changes = 0  # counts every change of the records: a summary computed before one is stale
        self.inventory_changes = 0  # the same, of the inventory's answers and forms

    def add(self, kind: str, user: str, record: dict, at: float | None = None) -> bool:
        """Store one record (at ``at``, else now); False when its id was stored before (nothing changes then).
        A reveal whose ``predicted`` is None was left unanswered; one sent after the instructor opened a second
        vote on its prompt in this session is round 2 (the store decides, so a kernel cannot choose its round)."""
        table = KINDS[kind]
        row = {c.name: record[c.name] for c in table.columns if c.name in record and c.name not in ("user", "at")}
        if kind == "reveal":
            row |= {"answered": record["predicted"] is not None, "predicted": record["predicted"] or "",
                    "agreed": bool(record["agreed"]), "instructor_run": user in self.instructors}
        with self.engine.begin() as conn:
            if conn.execute(sa.select(table.c.id).where(table.c.id == row["id"])).first():
                return False
            at = time.time() if at is None else at
            if kind == "reveal":
                row["round"] = _round(conn, row["lesson"], row["prompt"], at)
            try:
                conn.execute(table.insert().values(user=user, at=at, **row))
            except sa.exc.IntegrityError:  # the same id, sent twice at once
                return False
        self._keep(kind, {c.name: None for c in table.columns} | row | {"user": user, "at": at})
        if kind == "reveal" and row["instructor_run"]:
            self._refs = None  # read again at the next ``references``
        self.inventory_changes += kind == "inventory"
        return True

    def _keep(self, kind: str, row: dict) -> None:
        """Add a stored record to the latest session kept in memory (a newer session replaces it)."""
        self.changes += 1
        if self._session is None:
            return
        session = learning.session_of(row["at"])
        if self._session["session"] is None or session > self._session["session"]:  # None: the store was empty
            self._session = {"session": session} | {k: [] for k in KINDS}
        if session == self._session["session"]:
            bisect.insort(self._session[kind], row, key=lambda r: (r["at"], r["id"]))

    def remove(self, user: str, by: str) -> dict:
        """Delete every record of ``user`` (one transaction) and note who did it; the counts removed."""
        with self.engine.begin() as conn:
            counts = {name: conn.execute(table.delete().where(table.c.user == user)).rowcount
                      for name, table in (("reveals", reveals), ("checks", checks), ("inventory", inventory))}
            conn.execute(removals.insert().values(user=user, removed_by=by, at=time.time(), **counts))
        self._session, self._refs = None, None
        self.changes, self.inventory_changes = self.changes + 1, self.inventory_changes + 1
        return counts

    def records(self, kind: str, user: str | None = None) -> list[dict]:
        """Every record of ``kind`` (only ``user``'s when given), oldest first, read from the database."""
        table = KINDS[kind]
        query = sa.select(table).order_by(table.c.at, table.c.id)
        if user is not None:
            query = query.where(table.c.user == user)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def latest(self) -> dict:
        """{"session": the day of the newest record (None in an empty store), kind: that day's records, oldest
        first}: read from the database once, then kept up to date by ``add``."""
        if self._session is None:
            with self.engine.connect() as conn:
                newest = max((conn.execute(sa.select(sa.func.max(t.c.at))).scalar() or 0.0 for t in KINDS.values()),
                             default=0.0)
                session = learning.session_of(newest) if newest else None
                kept = {"session": session} | {kind: [] for kind in KINDS}
                if session:
                    since = time.mktime(time.strptime(session, "%Y-%m-%d")) - 3 * 3600  # midnight, a clock change early
                    for kind, table in KINDS.items():
                        rows = conn.execute(sa.select(table).where(table.c.at >= since).order_by(table.c.at, table.c.id))
                        kept[kind] = [r for r in map(lambda r: dict(r._mapping), rows)
                                      if learning.session_of(r["at"]) == session]
            self._session = kept
        return self._session

    def references(self) -> dict[tuple, str]:
        """{(lesson, prompt line): what the instructor's own kernel measured, their latest run in any session}."""
        if self._refs is None:
            query = sa.select(reveals).where(reveals.c.instructor_run == sa.true()).order_by(reveals.c.at, reveals.c.id)
            with self.engine.connect() as conn:
                self._refs = learning.references([dict(r._mapping) for r in conn.execute(query)])
        return self._refs

    def assign_form(self, user: str, at: float | None = None) -> str:
        """The inventory form ``user`` takes before the lessons (they take the other after): chosen once, at their
        first ask, as the form fewer learners took first so far (A on a tie), and kept in the store, so the room
        stays counterbalanced (half A then B, half B then A) and a learner's form survives a restart."""
        with self.engine.begin() as conn:
            first = conn.execute(sa.select(forms.c.first).where(forms.c.user == user)).scalar()
            if first is None:
                taken = Counter(conn.execute(sa.select(forms.c.first)).scalars())
                first = min(FORMS, key=lambda f: (taken[f], f))
                try:
                    conn.execute(forms.insert().values(user=user, first=first, at=time.time() if at is None else at))
                except sa.exc.IntegrityError:  # asked twice at once: the first answer stands
                    first = None
        if first is None:
            return self.assign_form(user, at)
        self.changes += 1
        self.inventory_changes += 1
        return first

    def forms(self) -> dict[str, str]:
        """{user: the form they take before the lessons}."""
        with self.engine.connect() as conn:
            return {r.user: r.first for r in conn.execute(sa.select(forms))}

    def room(self, manifest, learners: list[str], basis: str, now: float | None = None, instructors=(),
             bank=None) -> dict:
        """What the instructor's page shows, over the latest session (``latest``; earlier ones are in the
        report), in the course's order: every prompt of every lesson (by its question; predictions, answers after
        seeing, left unanswered, not reached, of N learners; right by the instructor's run; its most common wrong
        predictions; a second round's votes beside the first), the furthest prompt each learner reached and who is
        stuck where, the prompt the room is on, every exercise of every lab, and the concept inventory's g per
        concept with its interval and its item statistics (``bank``: the item bank; None leaves it out).
        N counts ``learners`` (``basis`` says who they are) and whoever sent a record in it, never ``instructors``
        (their kernels' runs are the prompts' reference). Computed again only when a record changed it, the
        learners changed, or 2 s passed."""
        key = (self.changes, tuple(learners), basis, now, tuple(instructors), bank is not None)
        if self._summary and self._summary[0] == key and time.monotonic() - self._summary[1] < CACHE_SECONDS:
            return self._summary[2]
        summary = self._room(manifest, learners, basis, now, set(instructors), bank)
        self._summary = (key, time.monotonic(), summary)
        return summary

    def _room(self, manifest, learners, basis, now, instructors, bank) -> dict:
        kept = self.latest()
        session = kept["session"] or learning.session_of(time.time() if now is None else now)
        reveals = [r for r in kept["reveal"] if not r["instructor_run"] and r["user"] not in instructors]
        refs = self.references()
        found, unknown = learning.first_answers(manifest, [r for r in reveals if r["round"] == 1])
        second, unknown_second = learning.first_answers(manifest, [r for r in reveals if r["round"] == 2])
        unknown += unknown_second
        where = learning.furthest(manifest, reveals)
        tried: dict[tuple, set] = {}
        passed: dict[tuple, set] = {}
        last_check: dict[str, dict] = {}
        session_checks = [r for r in kept["check"] if r["user"] not in instructors]
        for r in session_checks:
            lab = manifest.lab(r["lab"])
            if lab is None or r["exercise"] not in lab.exercises:
                unknown += 1
                continue
            tried.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            if r["passed"]:
                passed.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            last_check[r["user"]] = {"lab": lab.title, "exercise": r["exercise"], "at": r["at"]}
        answers = [r for r in kept["inventory"] if r["user"] not in instructors]
        seen = learning.last_seen(reveals, session_checks, answers)
        everyone = sorted((set(learners) | set(seen)) - instructors)
        n = len(everyone)

        positions = Counter((w["lesson"], w["index"]) for w in where.values())
        follow = None
        if positions:  # the furthest prompt most learners reached; on a tie, the one reached latest
            (lesson, index), _ = max(positions.items(), key=lambda kv: (kv[1], max(
                w["at"] for w in where.values() if (w["lesson"], w["index"]) == kv[0])))
            follow = {"lesson": lesson, "index": index}

        labs = [{"id": lab.id, "label": lab.label, "title": lab.title, "exercises": [
            {"name": e, "passed": len(passed.get((lab.label, e), ())),
             "tried": len(tried.get((lab.label, e), set()) - passed.get((lab.label, e), set())),
             "not_started": n - len(tried.get((lab.label, e), ()))} for e in lab.exercises]} for lab in manifest.labs]
        with self.engine.connect() as conn:
            removed = [dict(r._mapping) for r in conn.execute(sa.select(removals).order_by(removals.c.at))]
        return {"session": session, "learners": {"n": n, "names": everyone, "basis": basis},
                "lessons": learning.prompts(manifest, found, second, refs, n, self.rounds(session)), "follow": follow,
                "inventory": self._inventory_of(answers, bank, manifest, session),
                "positions": [{"user": u, "reveal": where.get(u), "check": last_check.get(u)} for u in everyone],
                "stuck": learning.stuck(manifest, found, refs, everyone, seen, now),
                "labs": labs, "removals": removed, "not_in_course": unknown}

    def _inventory_of(self, answers: list[dict], bank, manifest, session: str) -> dict | None:
        """The session's inventory summary (``learning.inventory``) and when it was computed. It is computed again
        when an answer or a form changed it: at once while that is quick (``QUICK`` s), else in a thread of its own
        (a bootstrap over forty learners takes about a second on two cores, and the service must keep taking
        records meanwhile), while the page shows the last one and says as of when."""
        if bank is None:
            return None
        key = (self.inventory_changes, id(bank), session)
        kept = self._inventory  # (key, seconds it took, summary)
        if kept is not None and kept[0] == key:
            return kept[2]

        def compute(records: list[dict]) -> None:
            began = time.monotonic()
            summary = learning.inventory(records, bank, self.forms(), manifest=manifest) | {"as_of": time.time()}
            self._inventory = (key, time.monotonic() - began, summary)

        if kept is None or kept[0][1:] != key[1:] or kept[1] < QUICK:
            compute(answers)
        elif self._computing is None or self._computing.done():
            self._computing = self._worker().submit(compute, list(answers))
        return self._inventory[2]

    def _worker(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="room-inventory")
        return self._pool

    def open_round(self, lesson: str, prompt: str, by: str, at: float | None = None) -> int | None:
        """Open the second vote on a prompt (at ``at``, else now): its reveals sent from then to the session's end
        count as round 2. None when this session's second vote on it is open already."""
        at = time.time() if at is None else at
        with self.engine.begin() as conn:
            if _round(conn, lesson, prompt, at) == 2:
                return None
            conn.execute(rounds.insert().values(lesson=lesson, prompt=prompt, round=2, opened_by=by, at=at))
        self.changes += 1
        return 2

    def round_of(self, record_id: str) -> int | None:
        """The round a stored reveal counts in, or None when no reveal has that id."""
        with self.engine.connect() as conn:
            return conn.execute(sa.select(reveals.c.round).where(reveals.c.id == record_id)).scalar()

    def rounds(self, session: str) -> set[tuple]:
        """{(lesson, prompt line)} of the prompts whose second vote opened in ``session``."""
        with self.engine.connect() as conn:
            return {(r.lesson, r.prompt) for r in conn.execute(sa.select(rounds)) if learning.session_of(r.at) == session}

    def export_csv(self) -> str:
        """The whole store, one row per record, every kind in one table (an inventory answer: its form, item,
        choice and phase; a key shown has no choice; an instructor's reveal is the prompt's reference); no cell a
        spreadsheet would run."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["kind", "user", "time", "lesson_or_lab", "prompt_or_exercise", "answered", "predicted",
                    "measured", "agreed", "passed", "attempt", "round", "phase", "instructor_run"])
        for r in self.records("reveal"):
            w.writerow(map(_cell, ["reveal", r["user"], _iso(r["at"]), r["lesson"], r["prompt"], r["answered"],
                                   r["predicted"], r["measured"], r["agreed"], "", "", r["round"], "", r["instructor_run"]]))
        for r in self.records("check"):
            w.writerow(map(_cell, ["check", r["user"], _iso(r["at"]), r["lab"], r["exercise"], "", "", "", "",
                                   r["passed"], r["attempt"], "", "", ""]))
        for r in self.records("inventory"):
            w.writerow(map(_cell, ["inventory", r["user"], _iso(r["at"]), r["form"], r["item"], r["choice"] is not None,
                                   r["choice"] or "", "", "", "", "", "", r["phase"], ""]))
        return out.getvalue()


def _round(conn, lesson: str, prompt: str, at: float) -> int:
    """2 when the prompt's second vote opened before ``at`` in the same session, else 1."""
    opened = conn.execute(sa.select(rounds.c.at).where(rounds.c.lesson == lesson, rounds.c.prompt == prompt,
                                                       rounds.c.at <= at)).scalars()
    return 2 if any(learning.session_of(t) == learning.session_of(at) for t in opened) else 1


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: one starting with = + - @, tab or CR gets a leading quote
    (OWASP's advice against formula injection)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
