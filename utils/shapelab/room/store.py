"""The room's store: every revealed prediction and lab check a learner's kernel sent, once each.

SQLite by default (one file, WAL, every commit synced before the service answers, so a restart
loses nothing acknowledged); a PostgreSQL URL (``postgresql://...``, driver installed separately)
for a hub on several machines. The same SQLAlchemy Core statements serve both. The schema is
versioned: ``MIGRATIONS`` lists the steps in order and ``Store`` applies the missing ones at start.
"""
from __future__ import annotations

import csv
import io
import time

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

by_prompt = sa.Index("reveals_by_prompt", reveals.c.lesson, reveals.c.prompt)
by_exercise = sa.Index("checks_by_exercise", checks.c.lab, checks.c.exercise)


def _v1(conn):
    """The records themselves."""
    for table in (reveals, checks):
        conn.execute(sa.schema.CreateTable(table))  # the table alone: its indexes belong to _v2


def _v2(conn):
    """Indexes for the instructor's page, which groups by prompt and by exercise."""
    by_prompt.create(conn)
    by_exercise.create(conn)


MIGRATIONS = [_v1, _v2]  # MIGRATIONS[i] takes the schema from version i to i + 1
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
        """Store one record; False when its id was stored before (nothing changes then)."""
        table = KINDS[kind]
        row = {c.name: record[c.name] for c in table.columns if c.name not in ("user", "at")}
        with self.engine.begin() as conn:
            if conn.execute(sa.select(table.c.id).where(table.c.id == row["id"])).first():
                return False
            try:
                conn.execute(table.insert().values(user=user, at=time.time(), **row))
            except sa.exc.IntegrityError:  # the same id, sent twice at once
                return False
        return True

    def records(self, kind: str, user: str | None = None) -> list[dict]:
        """Every record of ``kind`` (only ``user``'s when given), oldest first."""
        table = KINDS[kind]
        query = sa.select(table).order_by(table.c.at, table.c.id)
        if user is not None:
            query = query.where(table.c.user == user)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def room(self, learners: list[str]) -> dict:
        """What the instructor's page shows: every prompt's predictions (the latest per learner) and
        every exercise's passed / tried / not started (over ``learners`` and whoever sent a check)."""
        prompts: dict[tuple, dict] = {}
        for r in self.records("reveal"):
            p = prompts.setdefault((r["lesson"], r["prompt"]), {"lesson": r["lesson"], "prompt": r["prompt"],
                                                                  "latest": 0.0, "by_user": {}})
            p["by_user"][r["user"]] = r  # later records replace earlier ones: a learner's latest prediction
            p["latest"] = max(p["latest"], r["at"])
        out_prompts = []
        for p in sorted(prompts.values(), key=lambda p: -p["latest"]):
            counts: dict[str, int] = {}
            measured: dict[str, int] = {}
            for r in p["by_user"].values():
                counts[r["predicted"]] = counts.get(r["predicted"], 0) + 1
                measured[r["measured"]] = measured.get(r["measured"], 0) + 1
            agreed = sum(r["agreed"] for r in p["by_user"].values())
            out_prompts.append({"lesson": p["lesson"], "prompt": p["prompt"], "predictions": counts,
                                "measured": max(measured, key=measured.get), "answered": len(p["by_user"]),
                                "agreed": agreed, "latest": p["latest"]})
        exercises: dict[tuple, dict] = {}
        for r in self.records("check"):
            e = exercises.setdefault((r["lab"], r["exercise"]), {"lab": r["lab"], "exercise": r["exercise"],
                                                                 "passed": set(), "tried": set()})
            e["tried"].add(r["user"])
            if r["passed"]:
                e["passed"].add(r["user"])
        everyone = set(learners) | {u for e in exercises.values() for u in e["tried"]}
        out_exercises = [{"lab": e["lab"], "exercise": e["exercise"], "passed": len(e["passed"]),
                          "tried": len(e["tried"] - e["passed"]), "not_started": len(everyone - e["tried"])}
                         for e in exercises.values()]
        return {"prompts": out_prompts, "exercises": out_exercises, "learners": len(everyone)}

    def export_csv(self) -> str:
        """The whole session, one row per record, both kinds in one table."""
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(["kind", "user", "time", "lesson_or_lab", "prompt_or_exercise", "predicted", "measured",
                    "agreed", "passed", "attempt"])
        for r in self.records("reveal"):
            w.writerow(["reveal", r["user"], _iso(r["at"]), r["lesson"], r["prompt"], r["predicted"], r["measured"],
                        r["agreed"], "", ""])
        for r in self.records("check"):
            w.writerow(["check", r["user"], _iso(r["at"]), r["lab"], r["exercise"], "", "", "", r["passed"],
                        r["attempt"]])
        return out.getvalue()


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
