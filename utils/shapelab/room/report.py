"""The session report: what a room learned, as one HTML page with its plots drawn here (SVG, no script, nothing
fetched: the hub has no internet) and one CSV.

A session is one calendar day of records in the store, on the server's clock (``learning.session_of``): a room
run twice a day is one session, a room that crashed and restarted is still one. For the latest session: each
concept's share right on the concept inventory before and after, g with its bootstrap interval and n (below 0.3
flagged), how many learners make g meaningful (the scorer's simulation); the inventory's items across every session (difficulty,
discrimination, each distractor's count with the misconception it stands for, flagged items first); each prompt's
first vote against its second (Peer Instruction) with its most common wrong predictions; who is stuck where.
Across sessions: g per concept per session, so a rewrite of a section shows in the next session's row. Every
number comes from ``learning``, as on the live page.

    python -m shapelab.room.report --db sqlite:////srv/shapelab/state/room.sqlite --out report/
    (or SHAPELAB_ROOM_DB in the environment, as the service reads it)
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import os
import sys
import textwrap
from pathlib import Path

from . import learning
from . import manifest as course
from .store import Store

LOW = 0.3  # g below this is flagged (Hake's traditional lectures averaged 0.23)


def sessions(manifest, store: Store, bank=None) -> dict[str, dict]:
    """{session: its summary} in date order: the inventory's g per concept and its items (across every session),
    each prompt's votes and wrong predictions, who is stuck."""
    bank = bank or learning.course_bank()
    kinds = {kind: store.records(kind) for kind in ("reveal", "check", "inventory")}
    teachers = store.instructors | {r["user"] for r in kinds["reveal"] if r["instructor_run"]}
    refs = store.references()
    assigned = store.forms()
    days: dict[str, dict] = {}
    for kind, records in kinds.items():
        for r in records:
            if r["user"] not in teachers:
                days.setdefault(learning.session_of(r["at"]), {k: [] for k in kinds})[kind].append(r)
    out = {}
    for day in sorted(days):
        reveals, checks, answers = days[day]["reveal"], days[day]["check"], days[day]["inventory"]
        found, _ = learning.first_answers(manifest, [r for r in reveals if r["round"] == 1])
        second, _ = learning.first_answers(manifest, [r for r in reveals if r["round"] == 2])
        seen = learning.last_seen(reveals, checks, answers)
        lessons = learning.prompts(manifest, found, second, refs, len(seen), store.rounds(day))
        out[day] = {"inventory": learning.inventory(answers, bank, assigned, kinds["inventory"], manifest)
                    if bank is not None else None,
                    "lessons": lessons,
                    "wrong": [(lesson, p, p["wrong"]) for lesson in lessons for p in lesson["prompts"] if p["wrong"]],
                    "stuck": learning.stuck(manifest, found, refs, sorted(seen), seen, max(seen.values())),
                    "learners": len(seen)}
    return out


def to_csv(summary: dict[str, dict]) -> str:
    """One row per session and concept of the inventory; shares and g as decimals, blank where undefined."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["session", "lesson", "concept", "right_before", "right_after", "g", "g_low", "g_high", "n"])
    for day, s in summary.items():
        for c in (s["inventory"] or {}).get("concepts", []):
            w.writerow([day, c["lesson"], c["concept"], _num(c["pre"]), _num(c["post"]), _num(c["g"]), _num(c["lo"]),
                        _num(c["hi"]), c["n"]])
    return out.getvalue()


def to_html(summary: dict[str, dict]) -> str:
    """The report's page: the latest session in full, then g per concept per session."""
    e = html.escape
    parts = [_HEAD]
    if not summary:
        parts.append("<p>No record in this store yet.</p>")
        return "".join(parts) + "</body></html>\n"
    day = max(summary)
    s = summary[day]
    inv = s["inventory"]
    parts.append(f"<p>Session of {e(day)}, the latest of {len(summary)} in this store: {s['learners']} learners "
                 "sent records.</p>")
    parts.append("<h2>What the room learned: the concept inventory</h2>")
    if inv is None:
        parts.append("<p class=muted>This course has no concept inventory.</p>")
    else:
        answered = [c for c in inv["concepts"] if c["n"]]
        empty = [c["concept"] for c in inv["concepts"] if not c["n"]]
        parts.append(f"<p>{_inventory_words(inv)}</p>")
        parts.append(_bars_svg(answered) + _concept_table(answered))
        if empty:
            parts.append(f"<p class=muted id=empty>{len(empty)} concepts with no learner who took both forms: "
                         f"{e(', '.join(empty))}.</p>")
        parts.append("<h2>The inventory's items, every session</h2>" + _items_table(inv["items"]))
    parts.append("<h2>The prompts: first vote and second vote (Peer Instruction)</h2>" + _votes_table(s["lessons"]))
    parts.append("<h2>The most common wrong predictions</h2>")
    if s["wrong"]:
        rows = "".join(f"<tr><td>{e(lesson['id'][:2])}</td><td>{e(p['question'])}</td><td><code>{e(answer)}</code></td>"
                       f"<td class=n>{n}</td><td>{e(idea) or '<span class=muted>(not worded by the lesson)</span>'}</td></tr>"
                       for lesson, p, wrong in s["wrong"] for answer, n, idea in wrong)
        parts.append("<table id=wrong><tr><th>lesson</th><th>prompt</th><th>answer</th><th>learners</th>"
                     f"<th>the idea it reveals</th></tr>{rows}</table>")
    else:
        parts.append("<p class=muted>None.</p>")
    parts.append("<h2>Who is stuck where</h2>")
    if s["stuck"]:
        rows = "".join(f"<tr><td>{e(x['user'])}</td><td>{e(', '.join(x['wrong_after'])) or '–'}</td>"
                       f"<td class=n>{'' if x['idle_min'] is None else x['idle_min']}</td></tr>" for x in s["stuck"])
        parts.append("<table id=stuck><tr><th>learner</th><th>wrong after (post question)</th>"
                     f"<th>minutes without a record (prompt, lab check or inventory) before the last</th></tr>{rows}</table>")
    else:
        parts.append("<p class=muted>Nobody.</p>")
    parts.append("<h2>Across sessions: g per concept</h2>" + _sessions_svg(summary) + _sessions_table(summary))
    return "".join(parts) + "</body></html>\n"


def _inventory_words(inv: dict) -> str:
    """What the concept table rests on, in one paragraph."""
    o, left = inv["orders"], inv["left_out"]
    off = f", {o['off_plan']} answered another form than the one assigned" if o["off_plan"] else ""
    return (f"Right before and after on the concept inventory (the lessons' prompts are not in it), over the learners "
            f"who answered a concept on both forms; g = (after - before) / (1 - before) with its {round(100 * inv['level'])} % bootstrap "
            f"interval; below {LOW} flagged. Forms: {o['AB']} took A before, {o['BA']} B before{off}. "
            f"Left out: {left['after_seeing']} answers given after the learner saw the key, {left['changed']} changed "
            f"answers (the first counts). From {inv['meaningful']} learners a concept's interval tells a gain of 0.5 "
            "from none (the scorer's simulation); below that, read the interval, not the number.")
_HEAD = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>The room: session report</title>
<style>body{font:15px/1.4 system-ui,sans-serif;margin:1em 1.5em;color:#222;max-width:75em}
h1{font-size:1.25em}h2{font-size:1.05em;margin:1.2em 0 .3em}table{border-collapse:collapse}
td,th{padding:.15em .6em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.low td{background:#fce8e6}.muted{color:#666}
code{background:#f3f3f3;padding:0 .3em}</style></head><body><h1>The room: session report</h1>
"""


def _concept_table(concepts: list[dict]) -> str:
    rows = "".join(f"<tr class='{'low' if _low(c) else ''}' data-concept='{html.escape(c['concept'])}'>"
                   f"<td>{html.escape(c['lesson'][:2])}</td><td>{html.escape(c['concept'])}</td>"
                   f"<td class=n>{_pct(c['pre'])}</td><td class=n>{_pct(c['post'])}</td><td class=n>{_g(c['g'])}</td>"
                   f"<td class=n>{_interval(c)}</td><td class=n>{c['n']}</td>"
                   f"<td class=muted>{'below 0.3' if _low(c) else ''}</td></tr>" for c in concepts)
    return ("<table id=concepts><tr><th>lesson</th><th>concept</th><th>right before</th><th>right after</th>"
            f"<th>g</th><th>95 % interval</th><th>n</th><th></th></tr>{rows}</table>")


def _items_table(items: list[dict]) -> str:
    """Each item answered: difficulty, discrimination, its distractors' counts by misconception, its flags."""
    if not items:
        return "<p class=muted>No inventory answer yet.</p>"
    e = html.escape
    rows = "".join(
        f"<tr data-item='{e(i['item'])}' data-phase='{e(i['phase'])}' class='{'low' if i['flags'] else ''}'>"
        f"<td>{e(i['item'])}</td><td>{'before' if i['phase'] == 'pre' else 'after'}</td>"
        f"<td>{e(i['concept'])}</td><td class=n>{i['n']}</td><td class=n>{_pct(i['difficulty'])}</td>"
        f"<td class=n>{_g(i['discrimination'])}</td><td>"
        + "<br>".join(f"<b>{e(choice)}</b> {n}{' · ' + e(idea) if idea else ''}" for choice, n, idea in i["distractors"])
        + f"</td><td>{e(', '.join(i['flags']))}</td></tr>" for i in items)
    return ("<table id=items><tr><th>item</th><th>taken</th><th>concept</th><th>answers</th><th>right</th><th>discrimination</th>"
            f"<th>distractors chosen (the misconception)</th><th>flag</th></tr>{rows}</table>")


def _votes_table(lessons: list[dict]) -> str:
    """Each prompt answered: right in the first vote, and in the second where the instructor opened one."""
    e = html.escape
    rows = ""
    for lesson in lessons:
        for p in lesson["prompts"]:
            if not (p["answered"] or p["after_seeing"] or p["second"]):
                continue
            second = p["second"]
            differ = f" ({p['differ']} kernels measured otherwise)" if p["differ"] else ""
            rows += (f"<tr data-prompt='{e(p['line'])}'><td>{e(lesson['id'][:2])} · {p['index'] + 1}</td>"
                     f"<td>{e(textwrap.shorten(p['question'], 120, placeholder=' …'))}</td><td class=n>{_right(p)}</td>"
                     f"<td class=n>{_right(second) if second else '–'}</td><td class=n>{p['after_seeing']}</td>"
                     f"<td>{'the instructor’s run: ' + e(p['reference']) if p['reference'] is not None else 'each learner’s own kernel'}"
                     f"{differ}</td></tr>")
    if not rows:
        return "<p class=muted>No prompt answered.</p>"
    return ("<table id=votes><tr><th>prompt</th><th>question</th><th>right, first vote</th><th>right, second vote</th>"
            f"<th>after seeing (left out)</th><th>right by</th></tr>{rows}</table>")


def _right(votes: dict) -> str:
    return f"{votes['right']} of {votes['answered']}"


def _interval(c: dict) -> str:
    return "–" if c["lo"] is None or c["hi"] is None else f"{c['lo']:.2f} to {c['hi']:.2f}"


def _answered(s: dict) -> list[dict]:
    """A session's inventory concepts that someone answered on both forms."""
    return [c for c in (s["inventory"] or {}).get("concepts", []) if c["n"]]


def _sessions_table(summary: dict[str, dict]) -> str:
    keys = list(dict.fromkeys((c["lesson"], c["concept"]) for s in summary.values() for c in _answered(s)))
    head = "".join(f"<th>{html.escape(day)}</th>" for day in summary)
    rows = ""
    for lesson, concept in keys:
        cells = ""
        for s in summary.values():
            c = next((c for c in _answered(s) if (c["lesson"], c["concept"]) == (lesson, concept)), None)
            cells += "<td class=n>–</td>" if c is None else \
                f"<td class='n {'low' if _low(c) else ''}'>{_g(c['g'])} [{_interval(c)}] (n {c['n']})</td>"
        rows += f"<tr><td>{html.escape(lesson[:2])} {html.escape(concept)}</td>{cells}</tr>"
    return f"<table id=sessions><tr><th>concept</th>{head}</tr>{rows}</table>"


def _bars_svg(concepts: list[dict]) -> str:
    """Per concept, right before (grey) and right after (green) as bars on 0-100 %, g written beside."""
    row, left, width = 34, 190, 420
    height = 30 + row * len(concepts)
    out = [f'<svg id=bars xmlns="http://www.w3.org/2000/svg" width="{left + width + 230}" height="{height}" '
           'role="img" aria-label="right before and after, per concept">',
           f'<text x="{left}" y="14" font-size="12">0 %</text><text x="{left + width - 30}" y="14" font-size="12">100 %</text>']
    for i, c in enumerate(concepts):
        y = 22 + i * row
        out.append(f'<text x="0" y="{y + 16}" font-size="13">{html.escape((c["lesson"][:2] + " " + c["concept"])[:26])}</text>')
        for j, (share, colour) in enumerate(((c["pre"], "#9aa0a6"), (c["post"], "#188038"))):
            out.append(f'<rect class=track x="{left}" y="{y + j * 13}" width="{width}" height="11" fill="#f1f3f4"/>'
                       f'<rect x="{left}" y="{y + j * 13}" width="{width * (share or 0):.1f}" height="11" fill="{colour}"/>'
                       f'<text x="{left + 4 + width * (share or 0):.1f}" y="{y + j * 13 + 10}" font-size="10">{_pct(share)}</text>')
        out.append(f'<text x="{left + width + 8}" y="{y + 16}" font-size="13" fill="{"#c5221f" if _low(c) else "#222"}">'
                   f'g {_g(c["g"])} [{_interval(c)}] (n {c["n"]})</text>')
    return "\n".join(out) + "</svg><p class=muted>grey: right before · green: right after · g [its 95 % interval]</p>"


def _sessions_svg(summary: dict[str, dict]) -> str:
    """g per concept (one line each) over the sessions, the 0.3 line dashed."""
    days = list(summary)
    keys = list(dict.fromkeys((c["lesson"], c["concept"]) for s in summary.values() for c in _answered(s)))
    gs = [c["g"] for s in summary.values() for c in _answered(s) if c["g"] is not None]
    low, high = min([-0.2, *gs]), 1.0
    w, h, pad = 560, 220, 40
    x = {d: pad + (w - 2 * pad) * (i / max(1, len(days) - 1) if len(days) > 1 else 0.5) for i, d in enumerate(days)}

    def y(g):
        return pad / 2 + (h - pad) * (high - g) / (high - low)

    colours = ["#1a73e8", "#188038", "#e37400", "#a142f4", "#c5221f", "#007b83", "#5f6368"]
    out = [f'<svg id=across xmlns="http://www.w3.org/2000/svg" width="{w + 200}" height="{h}" role="img" '
           'aria-label="g per concept per session">',
           f'<line x1="{pad}" x2="{w - pad}" y1="{y(LOW):.1f}" y2="{y(LOW):.1f}" stroke="#c5221f" stroke-dasharray="4 3"/>',
           f'<text x="{w - pad + 4}" y="{y(LOW) + 4:.1f}" font-size="11" fill="#c5221f">0.3</text>']
    for g in (0.0, 1.0):
        out.append(f'<text x="4" y="{y(g) + 4:.1f}" font-size="11">{g:.1f}</text>')
    for d in days:
        out.append(f'<text x="{x[d] - 30:.1f}" y="{h - 4}" font-size="11">{html.escape(d)}</text>')
    for k, key in enumerate(keys):
        colour = colours[k % len(colours)]
        points = [(x[d], y(c["g"])) for d in days for c in _answered(summary[d])
                  if (c["lesson"], c["concept"]) == key and c["g"] is not None]
        if len(points) > 1:
            out.append(f'<polyline fill="none" stroke="{colour}" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in points)}"/>')
        out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3.5" fill="{colour}"/>' for a, b in points]
        out.append(f'<text x="{w - pad + 30}" y="{20 + 16 * k}" font-size="12" fill="{colour}">'
                   f'{html.escape((key[0][:2] + " " + key[1])[:24])}</text>')
    return "\n".join(out) + "</svg>"


def _low(c: dict) -> bool:
    return c["g"] is not None and c["g"] < LOW


def _pct(x) -> str:
    return "–" if x is None else f"{round(100 * x)}%"


def _g(x) -> str:
    return "–" if x is None else f"{x:.2f}"


def _num(x) -> str:
    return "" if x is None else f"{x:.4f}"


def write(store: Store, manifest, out: Path, bank=None) -> tuple[Path, Path]:
    """report.html and report.csv in ``out`` (``bank``: the course's concept inventory unless given)."""
    summary = sessions(manifest, store, bank)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.html").write_text(to_html(summary))
    (out / "report.csv").write_text(to_csv(summary))
    return out / "report.html", out / "report.csv"


def main(argv=None) -> int:
    """Command line: write report.html and report.csv from the store at --db."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=os.environ.get("SHAPELAB_ROOM_DB"),
                        help="the room's store, a SQLAlchemy URL (default: $SHAPELAB_ROOM_DB)")
    parser.add_argument("--out", type=Path, required=True, help="the folder report.html and report.csv go to")
    parser.add_argument("--manifest", type=Path, default=course.PATH,
                        help="the course's manifest the records are read against (default: this course's)")
    args = parser.parse_args(argv)
    if not args.db:
        parser.error("no store: set SHAPELAB_ROOM_DB (or --db)")
    store = Store(args.db)
    paths = write(store, course.load(args.manifest), args.out)
    store.engine.dispose()
    print(f"wrote {paths[0]} and {paths[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
