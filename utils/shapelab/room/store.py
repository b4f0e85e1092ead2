"""The room's store: every revealed prediction and lab check a learner's kernel sent, once each.

SQLite by default (one file, WAL, every commit synced before the service answers, so a restart
loses nothing acknowledged); a PostgreSQL URL (``postgresql://...``, driver installed separately)
for a hub on several machines. The same SQLAlchemy Core statements serve both. The schema is
versioned: ``MIGRATIONS`` lists the steps in order and ``Store`` applies the missing ones at start.

``Store.room`` is what the instructor's page shows, read against the course's manifest: each learner
counts once per prompt (their first answer, as the learner's own summary does), and the measured value
is what most kernels measured.
"""
from __future__ import annotations

import csv
import io
import time
from collections import Counter

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
)

rounds = sa.Table(  # a prompt's second vote (Peer Instruction), opened by the instructor (v4)
    "rounds", metadata,
    sa.Column("lesson", sa.String(200), nullable=False),
    sa.Column("prompt", sa.String(200), nullable=False),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("opened_by", sa.String(255), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)

by_prompt = sa.Index("reveals_by_prompt", reveals.c.lesson, reveals.c.prompt)
by_exercise = sa.Index("checks_by_exercise", checks.c.lab, checks.c.exercise)


def _v1(conn):
    """The records themselves, as version 1 had them."""
    for table in (reveals, checks):
        v1 = sa.Table(table.name, sa.MetaData(), *[sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
                                                    for c in table.columns if c.name not in ("answered", "round")])
        conn.execute(sa.schema.CreateTable(v1))  # the table alone: its indexes belong to _v2


def _v2(conn):
    """Indexes for the instructor's page, which groups by prompt and by exercise."""
    by_prompt.create(conn)
    by_exercise.create(conn)


def _v3(conn):
    """A reveal left unanswered (``predicted = ...``) is recorded too; the instructor's removals are kept."""
    conn.execute(sa.text("ALTER TABLE reveals ADD COLUMN answered BOOLEAN NOT NULL DEFAULT TRUE"))
    conn.execute(sa.schema.CreateTable(removals))


def _v4(conn):
    """A second vote on a prompt: the rounds opened, and each reveal's round."""
    conn.execute(sa.text('ALTER TABLE reveals ADD COLUMN "round" INTEGER NOT NULL DEFAULT 1'))
    conn.execute(sa.schema.CreateTable(rounds))


MIGRATIONS = [_v1, _v2, _v3, _v4]  # MIGRATIONS[i] takes the schema from version i to i + 1
VERSION = len(MIGRATIONS)
KINDS = {"reveal": reveals, "check": checks}


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

    def __init__(self, url: str):
        self.engine = connect(url)
        migrate(self.engine)

    def add(self, kind: str, user: str, record: dict, at: float | None = None) -> bool:
        """Store one record (at ``at``, else now); False when its id was stored before (nothing changes then).
        A reveal whose ``predicted`` is None was left unanswered; one sent after the instructor opened a second
        vote on its prompt in this session is round 2 (the store decides, so a kernel cannot choose its round)."""
        table = KINDS[kind]
        row = {c.name: record[c.name] for c in table.columns if c.name in record and c.name not in ("user", "at")}
        if kind == "reveal":
            row |= {"answered": record["predicted"] is not None, "predicted": record["predicted"] or "",
                    "agreed": bool(record["agreed"])}
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
        return True

    def remove(self, user: str, by: str) -> dict:
        """Delete every record of ``user`` (one transaction) and note who did it; the counts removed."""
        with self.engine.begin() as conn:
            counts = {name: conn.execute(table.delete().where(table.c.user == user)).rowcount
                      for name, table in (("reveals", reveals), ("checks", checks))}
            conn.execute(removals.insert().values(user=user, removed_by=by, at=time.time(), **counts))
        return counts

    def records(self, kind: str, user: str | None = None) -> list[dict]:
        """Every record of ``kind`` (only ``user``'s when given), oldest first."""
        table = KINDS[kind]
        query = sa.select(table).order_by(table.c.at, table.c.id)
        if user is not None:
            query = query.where(table.c.user == user)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def room(self, manifest, learners: list[str], basis: str, now: float | None = None) -> dict:
        """What the instructor's page shows, in the course's order: every prompt of every lesson (by its
        question; answered, left unanswered, not reached, of N learners; its most common wrong predictions;
        a second round's votes beside the first), where each learner is and who is stuck where, the prompt
        the room is on, each concept's gain, and every exercise of every lab, over the latest session's records
        (``learning.session_of``: the day of the newest record; earlier ones are in the report). N counts
        ``learners`` (``basis`` says who they are) and whoever sent a record in it."""
        everything = {kind: self.records(kind) for kind in KINDS}
        newest = max((r["at"] for rs in everything.values() for r in rs), default=time.time() if now is None else now)
        session = learning.session_of(newest)
        reveals, session_checks = ([r for r in everything[kind] if learning.session_of(r["at"]) == session] for kind in KINDS)
        found, unknown = learning.first_answers(manifest, [r for r in reveals if r["round"] == 1])
        second, unknown_second = learning.first_answers(manifest, [r for r in reveals if r["round"] == 2])
        unknown += unknown_second
        where: dict[str, dict] = {}  # user -> their latest reveal, as a position
        last_seen: dict[str, float] = {}
        for r in reveals:
            found_at = manifest.prompt(r["lesson"], r["prompt"])
            if found_at is not None:
                where[r["user"]] = {"lesson": r["lesson"], "index": found_at[1], "at": r["at"]}
                last_seen[r["user"]] = r["at"]
        tried: dict[tuple, set] = {}
        passed: dict[tuple, set] = {}
        last_check: dict[str, dict] = {}
        for r in session_checks:
            lab = manifest.lab(r["lab"])
            if lab is None or r["exercise"] not in lab.exercises:
                unknown += 1
                continue
            tried.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            if r["passed"]:
                passed.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            last_check[r["user"]] = {"lab": lab.title, "exercise": r["exercise"], "at": r["at"]}
            last_seen[r["user"]] = max(last_seen.get(r["user"], 0.0), r["at"])
        everyone = sorted(set(learners) | set(where) | set(last_check))
        n = len(everyone)
        opened = self.rounds(session)

        lessons = []
        for lesson in manifest.lessons:
            prompts = []
            for i, p in enumerate(lesson.prompts):
                by_user = found.get((lesson.id, p.line), {})
                prompts.append({"index": i, "line": p.line, "kind": p.kind, "question": p.question, "name": p.name,
                                "concept": p.concept, "phase": p.phase, **_votes(by_user, n),
                                "wrong": learning.wrong_predictions(p, by_user),
                                "second": _votes(second.get((lesson.id, p.line), {}), n)
                                if (lesson.id, p.line) in opened else None})
            lessons.append({"id": lesson.id, "title": lesson.title, "prompts": prompts,
                            "reached": any((lesson.id, p.line) in found for p in lesson.prompts)})

        positions = Counter((w["lesson"], w["index"]) for w in where.values())
        follow = None
        if positions:  # the prompt most learners reached last; on a tie, the one reached latest
            (lesson, index), _ = max(positions.items(), key=lambda kv: (kv[1], max(
                w["at"] for w in where.values() if (w["lesson"], w["index"]) == kv[0])))
            follow = {"lesson": lesson, "index": index}

        labs = [{"id": lab.id, "label": lab.label, "title": lab.title, "exercises": [
            {"name": e, "passed": len(passed.get((lab.label, e), ())),
             "tried": len(tried.get((lab.label, e), set()) - passed.get((lab.label, e), set())),
             "not_started": n - len(tried.get((lab.label, e), ()))} for e in lab.exercises]} for lab in manifest.labs]
        with self.engine.connect() as conn:
            removed = [dict(r._mapping) for r in conn.execute(sa.select(removals).order_by(removals.c.at))]
        return {"session": session, "learners": {"n": n, "names": everyone, "basis": basis}, "lessons": lessons, "follow": follow,
                "concepts": learning.concepts(manifest, found),
                "positions": [{"user": u, "reveal": where.get(u), "check": last_check.get(u)} for u in everyone],
                "stuck": learning.stuck(manifest, found, everyone, last_seen, now),
                "labs": labs, "removals": removed, "not_in_course": unknown}

    def open_round(self, lesson: str, prompt: str, by: str, at: float | None = None) -> int | None:
        """Open the second vote on a prompt (at ``at``, else now): its reveals sent from then to the session's end
        count as round 2. None when this session's second vote on it is open already."""
        at = time.time() if at is None else at
        with self.engine.begin() as conn:
            if _round(conn, lesson, prompt, at) == 2:
                return None
            conn.execute(rounds.insert().values(lesson=lesson, prompt=prompt, round=2, opened_by=by, at=at))
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
        """The whole session, one row per record, both kinds in one table; no cell a spreadsheet would run."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["kind", "user", "time", "lesson_or_lab", "prompt_or_exercise", "answered", "predicted",
                    "measured", "agreed", "passed", "attempt", "round"])
        for r in self.records("reveal"):
            w.writerow(map(_cell, ["reveal", r["user"], _iso(r["at"]), r["lesson"], r["prompt"], r["answered"],
                                   r["predicted"], r["measured"], r["agreed"], "", "", r["round"]]))
        for r in self.records("check"):
            w.writerow(map(_cell, ["check", r["user"], _iso(r["at"]), r["lab"], r["exercise"], "", "", "", "",
                                   r["passed"], r["attempt"], ""]))
        return out.getvalue()


def _round(conn, lesson: str, prompt: str, at: float) -> int:
    """2 when the prompt's second vote opened before ``at`` in the same session, else 1."""
    opened = conn.execute(sa.select(rounds.c.at).where(rounds.c.lesson == lesson, rounds.c.prompt == prompt,
                                                       rounds.c.at <= at)).scalars()
    return 2 if any(learning.session_of(t) == learning.session_of(at) for t in opened) else 1


def _votes(by_user: dict, n: int) -> dict:
    """One round of a prompt's votes: answered, left unanswered, not reached (of ``n``), the predictions, what the
    kernels measured, the value most measured, and how many predicted it."""
    answered = [r for r in by_user.values() if r["answered"]]
    value = learning.majority(by_user)
    return {"answered": len(answered), "unanswered": len(by_user) - len(answered), "not_reached": n - len(by_user),
            "predictions": [[v, k] for v, k in Counter(r["predicted"] for r in answered).most_common()],
            "measured": [[v, k] for v, k in Counter(r["measured"] for r in by_user.values()).most_common()],
            # a kernel's "as predicted" counts only where it measured what the room did
            "majority": value, "agreed": sum(learning.right(r, value) for r in answered)}


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: one starting with = + - @, tab or CR gets a leading quote
    (OWASP's advice against formula injection)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
