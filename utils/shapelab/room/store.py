"""The room's store: every revealed prediction and lab check a learner's kernel sent, once each.

SQLite by default (one file, WAL, every commit synced before the service answers, so a restart
loses nothing acknowledged); a PostgreSQL URL (``postgresql://...``, driver installed separately)
for a hub on several machines. The same SQLAlchemy Core statements serve both. The schema is
versioned: ``MIGRATIONS`` lists the steps in order and ``Store`` applies the missing ones at start.

``Store.room`` is what the instructor's page shows, read against the course's manifest: each learner
counts once per prompt (their latest record), and the measured value is what most kernels measured.
"""
from __future__ import annotations

import csv
import io
import time
from collections import Counter

import sqlalchemy as sa

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

by_prompt = sa.Index("reveals_by_prompt", reveals.c.lesson, reveals.c.prompt)
by_exercise = sa.Index("checks_by_exercise", checks.c.lab, checks.c.exercise)


def _v1(conn):
    """The records themselves, as version 1 had them."""
    for table in (reveals, checks):
        v1 = sa.Table(table.name, sa.MetaData(), *[sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
                                                    for c in table.columns if c.name != "answered"])
        conn.execute(sa.schema.CreateTable(v1))  # the table alone: its indexes belong to _v2


def _v2(conn):
    """Indexes for the instructor's page, which groups by prompt and by exercise."""
    by_prompt.create(conn)
    by_exercise.create(conn)


def _v3(conn):
    """A reveal left unanswered (``predicted = ...``) is recorded too; the instructor's removals are kept."""
    conn.execute(sa.text("ALTER TABLE reveals ADD COLUMN answered BOOLEAN NOT NULL DEFAULT TRUE"))
    conn.execute(sa.schema.CreateTable(removals))


MIGRATIONS = [_v1, _v2, _v3]  # MIGRATIONS[i] takes the schema from version i to i + 1
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

    def add(self, kind: str, user: str, record: dict) -> bool:
        """Store one record; False when its id was stored before (nothing changes then). A reveal whose
        ``predicted`` is None was left unanswered."""
        table = KINDS[kind]
        row = {c.name: record[c.name] for c in table.columns if c.name in record and c.name not in ("user", "at")}
        if kind == "reveal":
            row |= {"answered": record["predicted"] is not None, "predicted": record["predicted"] or "",
                    "agreed": bool(record["agreed"])}
        with self.engine.begin() as conn:
            if conn.execute(sa.select(table.c.id).where(table.c.id == row["id"])).first():
                return False
            try:
                conn.execute(table.insert().values(user=user, at=time.time(), **row))
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

    def room(self, manifest, learners: list[str], basis: str) -> dict:
        """What the instructor's page shows, in the course's order: every prompt of every lesson (by its
        question; answered, left unanswered, not reached, of N learners), where each learner is, the prompt
        the room is on, and every exercise of every lab. N counts ``learners`` (``basis`` says who they
        are) and whoever sent a record."""
        latest: dict[tuple, dict] = {}  # (lesson, line) -> user -> their latest reveal
        where: dict[str, dict] = {}     # user -> their latest reveal or check, as a position
        unknown = 0
        for r in self.records("reveal"):
            found = manifest.prompt(r["lesson"], r["prompt"])
            if found is None:  # a prompt since removed from the course: in the CSV, not on the page
                unknown += 1
                continue
            latest.setdefault((r["lesson"], r["prompt"]), {})[r["user"]] = r
            where[r["user"]] = {"lesson": r["lesson"], "index": found[1], "at": r["at"]}
        tried: dict[tuple, set] = {}
        passed: dict[tuple, set] = {}
        last_check: dict[str, dict] = {}
        for r in self.records("check"):
            lab = manifest.lab(r["lab"])
            if lab is None or r["exercise"] not in lab.exercises:
                unknown += 1
                continue
            tried.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            if r["passed"]:
                passed.setdefault((r["lab"], r["exercise"]), set()).add(r["user"])
            last_check[r["user"]] = {"lab": lab.title, "exercise": r["exercise"], "at": r["at"]}
        everyone = sorted(set(learners) | set(where) | set(last_check))
        n = len(everyone)

        lessons = []
        scores: dict[tuple, dict] = {}  # (lesson, concept) -> phase -> user -> [right, answered]
        for lesson in manifest.lessons:
            prompts = []
            for i, p in enumerate(lesson.prompts):
                by_user = latest.get((lesson.id, p.line), {})
                answered = [r for r in by_user.values() if r["answered"]]
                measured = Counter(r["measured"] for r in by_user.values()).most_common()
                majority = measured[0][0] if measured and (len(measured) == 1 or measured[0][1] > measured[1][1]) \
                    else None  # a tie: no value is the room's
                prompts.append({
                    "index": i, "line": p.line, "kind": p.kind, "question": p.question, "name": p.name,
                    "answered": len(answered), "unanswered": len(by_user) - len(answered), "not_reached": n - len(by_user),
                    "predictions": [[v, k] for v, k in Counter(r["predicted"] for r in answered).most_common()],
                    "measured": [[v, k] for v, k in measured], "majority": majority,
                    # a kernel's "as predicted" counts only where it measured what the room did
                    "agreed": sum(r["agreed"] and r["measured"] == majority for r in answered)})
                if p.concept:
                    phase = scores.setdefault((lesson.id, p.concept), {"pre": {}, "post": {}})[p.phase]
                    for r in answered:
                        score = phase.setdefault(r["user"], [0, 0])
                        score[0] += bool(r["agreed"] and r["measured"] == majority)
                        score[1] += 1
            lessons.append({"id": lesson.id, "title": lesson.title, "prompts": prompts,
                            "reached": any((lesson.id, p.line) in latest for p in lesson.prompts)})

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
        return {"learners": {"n": n, "names": everyone, "basis": basis}, "lessons": lessons, "follow": follow,
                "concepts": [_gain(lesson, concept, phases) for (lesson, concept), phases in scores.items()],
                "positions": [{"user": u, "reveal": where.get(u), "check": last_check.get(u)} for u in everyone],
                "labs": labs, "removals": removed, "not_in_course": unknown}

    def export_csv(self) -> str:
        """The whole session, one row per record, both kinds in one table; no cell a spreadsheet would run."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["kind", "user", "time", "lesson_or_lab", "prompt_or_exercise", "answered", "predicted",
                    "measured", "agreed", "passed", "attempt"])
        for r in self.records("reveal"):
            w.writerow(map(_cell, ["reveal", r["user"], _iso(r["at"]), r["lesson"], r["prompt"], r["answered"],
                                   r["predicted"], r["measured"], r["agreed"], "", ""]))
        for r in self.records("check"):
            w.writerow(map(_cell, ["check", r["user"], _iso(r["at"]), r["lab"], r["exercise"], "", "", "", "",
                                   r["passed"], r["attempt"]]))
        return out.getvalue()


def _gain(lesson: str, concept: str, phases: dict) -> dict:
    """A concept's share of right answers before (its prompts) and after (its post questions), over the learners
    who answered both, and the normalised gain g = (post - pre) / (1 - pre) (Hake 1998); None where undefined."""
    both = sorted(set(phases["pre"]) & set(phases["post"]))
    share = {phase: (sum(phases[phase][u][0] for u in both) / sum(phases[phase][u][1] for u in both)) if both else None
             for phase in ("pre", "post")}
    pre, post = share["pre"], share["post"]
    g = (post - pre) / (1 - pre) if both and pre < 1 else None
    return {"lesson": lesson, "concept": concept, "pre": pre, "post": post, "g": g, "n": len(both),
            "only_pre": len(set(phases["pre"]) - set(both)), "only_post": len(set(phases["post"]) - set(both))}


def _cell(value) -> str:
    """A CSV cell a spreadsheet shows as text: one starting with = + - @, tab or CR gets a leading quote
    (OWASP's advice against formula injection)."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
