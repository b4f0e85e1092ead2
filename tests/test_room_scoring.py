"""The room's measures, entered as their users enter them (issues 35 and 37): learners' kernels POST to a real
room service (the hub's user lookup replaced by the token's text, as in test_room_units); the instructor reads
the page in Chromium at 1280 x 800.

- No learner's record moves another's verdict: a prompt's answer is right by the instructor's own run (or, before
  it, by the learner's own kernel); a forged measurement is shown as a disagreement and changes nobody's score.
- Only a first answer given before the measurement counts: an answer after a blank run is "after seeing", shown
  and left out of "right"; an inventory answer after its key (or its pair's) was shown is left out of g.
- The concept inventory: forms assigned counterbalanced and stable across restarts; records validated; g per
  concept with its bootstrap interval (the scorer's, from the inventory alone), item statistics and distractor
  counts by misconception on the page, legible above the fold; concepts nobody answered folded.
"""
from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from chromium import browser  # noqa: F401 (the fixture the page is read with)
from shapelab.room import learning, store
from test_room_units import SCREENSHOTS, Service, _check, _manifest, _reveal, fake_hub  # noqa: F401

BANK = learning.course_bank()
ROSTER = [f"l{i:02d}" for i in range(30)]
NOT_REACHED = BANK.inventory.concepts()[:3]  # no learner answers these after: folded on the page


def _answer(form, item, phase, choice):
    return {"id": uuid.uuid4().hex, "form": form, "item": item, "phase": phase, "choice": choice}


@pytest.fixture
def service(tmp_path, fake_hub):
    """The service over a store in memory-backed files where the machine has them (/dev/shm): 1,200 records are
    sent one by one, and a synced commit each on disk would be most of the test's time (durability is tested in
    test_room_units)."""
    folder = Path(tempfile.mkdtemp(dir="/dev/shm")) if Path("/dev/shm").is_dir() else tmp_path
    s = Service(f"sqlite:///{folder / 'room.sqlite'}", ROSTER + ["mallory"])
    yield s
    s.close()
    shutil.rmtree(folder, ignore_errors=True)


class Kernel:
    """One learner's kernel sending records over one kept-alive connection, as ``room.client`` sends them."""

    def __init__(self, service, user: str):
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
        self.prefix, self.user = service.url.split(str(service.port), 1)[1], user

    def request(self, method: str, path: str, body=None):
        self.conn.request(method, self.prefix + path, None if body is None else json.dumps(body),
                          {"Authorization": f"token {self.user}", "Content-Type": "application/json"})
        response = self.conn.getresponse()
        return response.status, json.loads(response.read() or b"null")


def _prompt(room, lesson_id, index=0):
    return next(x for x in room["lessons"] if x["id"] == lesson_id)["prompts"][index]


def test_no_learners_record_moves_anothers_verdict(service):
    """#37.3, the attack of the issue: alice alone answered a prompt, right; mallory POSTs a made-up "measured"
    (a tie before, a majority of forged kernels after): alice stays right; once the instructor's own kernel ran
    the prompt, right is judged by that run, and mallory's kernels show as measuring otherwise."""
    lesson = _manifest().lessons[1]
    assert service.post("reveal", "alice", _reveal(lesson.id, 0, predicted="3", measured="3", agreed=True))[0] == 201
    before = _prompt(service.room(), lesson.id)
    for _ in range(5):  # five records, one learner: one kernel
        service.post("reveal", "mallory", _reveal(lesson.id, 0, predicted="7", measured="7", agreed=True))
    for name in ("m1", "m2", "m3"):  # and three accomplices: a majority of forged kernels
        service.post("reveal", name, _reveal(lesson.id, 0, predicted="7", measured="7", agreed=True))
    after = _prompt(service.room(), lesson.id)
    assert before["right"] == 1 and [p for p in after["predictions"] if p[0] == "3"] == [["3", 1, 1]]
    assert after["reference"] is None and after["measured"] == [["7", 4], ["3", 1]]  # shown, decides nothing

    # the instructor runs the prompt in their own kernel: the reference; the forged kernels measured otherwise
    assert service.post("reveal", "teach", _reveal(lesson.id, 0, predicted=None, measured="3", agreed=None))[0] == 201
    room = service.room()
    judged = _prompt(room, lesson.id)
    assert judged["reference"] == "3" and judged["right"] == 1 and judged["differ"] == 4
    assert [p for p in judged["predictions"] if p[0] == "7"] == [["7", 4, 0]]
    assert "teach" not in room["learners"]["names"]  # the instructor is no learner of the room
    # the rule alone: a verdict reads the learner's own record and the instructor's run, nothing else
    alice = {"answered": True, "agreed": True, "predicted": "3", "measured": "3"}
    assert learning.right(alice, "3") and not learning.right(alice, "7") and learning.right(alice, None)
    assert learning.same("[0, 1024]", "'[0, 1024]'") and learning.same("3", " 3.0") and not learning.same("3", "4")


def test_an_answer_after_seeing_the_run_is_left_out(service):
    """#37.4: a blank run, then an answer, by POST: "after seeing" on the page, not right, not wrong; a first
    answer then a change: the first counts. The inventory: an answer after its key, or its pair's key on the
    other form, was shown is left out of g; a changed answer too."""
    lesson = _manifest().lessons[1]
    service.post("reveal", "teach", _reveal(lesson.id, 0, predicted=None, measured="3", agreed=None))
    service.post("reveal", "bob", _reveal(lesson.id, 0, predicted=None, measured="3", agreed=None))  # saw 3 graphs
    service.post("reveal", "bob", _reveal(lesson.id, 0, predicted="3", measured="3", agreed=True))   # wrote 3
    service.post("reveal", "carol", _reveal(lesson.id, 0, predicted="2", measured="3", agreed=False))
    service.post("reveal", "carol", _reveal(lesson.id, 0, predicted="3", measured="3", agreed=True))  # a change
    p = _prompt(service.room(), lesson.id)
    assert (p["answered"], p["after_seeing"], p["right"], p["unanswered"]) == (1, 1, 0, 0)
    assert p["predictions"] == [["2", 1, 0]] and p["wrong"] == [["2", 1, ""]]

    a, b = BANK.items("A")[0], BANK.items("B")[0]
    assert a.pair == b.pair
    wrong = next(c for c in "abcd" if c != b.key)
    records = [("dan", _answer("A", a.id, "pre", wrong)),
               ("dan", _answer("B", b.id, "post", None)),      # the results table showed B01's key
               ("dan", _answer("B", b.id, "post", b.key)),     # then dan answered it
               ("eve", _answer("A", a.id, "pre", None)),       # eve saw A01's key before answering anything
               ("eve", _answer("B", b.id, "post", b.key)),     # its pair, on the other form: after seeing
               ("fay", _answer("A", a.id, "pre", wrong)),
               ("fay", _answer("A", a.id, "pre", a.key))]      # a change: the first answer counts
    for user, record in records:
        assert service.post("inventory", user, record)[0] == 201
    inv = service.room()["inventory"]
    assert inv["left_out"] == {"after_seeing": 2, "changed": 1, "not_in_bank": 0}
    counted, _ = learning.inventory_answers(service.app.settings["store"].records("inventory"), BANK)
    assert sorted((r["user"], r["item"], r["choice"]) for r in counted) == [("dan", a.id, wrong), ("fay", a.id, wrong)]


def test_inventory_records_are_validated_and_forms_counterbalanced(tmp_path, fake_hub):
    """A learner's kernel asks its form: half the room A first, half B, the same answer again and after a
    restart; an inventory record naming an item the bank lacks, another form's item, a phase or a choice that
    is not one, is a 400 with one line, nothing stored; the records count against the learner's rate."""
    db = f"sqlite:///{tmp_path / 'room.sqlite'}"
    room = Service(db, ROSTER)
    try:
        forms = {u: room.request("GET", "/api/form", u)[1] for u in ROSTER}
        assert {f["form"] for f in forms.values()} == {"A", "B"}
        assert sum(f["form"] == "A" for f in forms.values()) == 15 and all(f["pre"] != f["post"] for f in forms.values())
        assert room.request("GET", "/api/form", None)[0] == 403
        item = BANK.items("A")[0]
        bad = {"an item the bank lacks": _answer("A", "A99", "pre", "a"),
               "another form's item": _answer("B", item.id, "pre", "a"),
               "an id not written exactly": _answer("A", item.id.lower(), "pre", "a"),
               "a phase": _answer("A", item.id, "during", "a"), "a choice": _answer("A", item.id, "pre", "f"),
               "a number": _answer("A", item.id, "pre", 1), "a field too many": _answer("A", item.id, "pre", "a") | {"g": 1}}
        for what, record in bad.items():
            status, answer = room.post("inventory", "l00", record)
            assert status == 400 and "\n" not in answer["error"], (what, status, answer)
        assert room.app.settings["store"].records("inventory") == []
        assert room.post("inventory", "l00", _answer("A", item.id, "pre", "e"))[0] == 201  # "I don't know"
        burst = room.app.settings["limit"].burst
        assert burst >= 2 * len(BANK.items("A"))  # two runs of a whole form
    finally:
        room.close()
    again = Service(db, ROSTER)
    try:
        assert {u: again.request("GET", "/api/form", u)[1]["form"] for u in ROSTER} == {u: f["form"] for u, f in forms.items()}
    finally:
        again.close()


def test_where_each_learner_is_and_who_is_stuck(tmp_path):
    """The furthest prompt a learner reached, not the latest (re-running an old cell moves no one back); a learner
    busy in a lab is not "quiet", on the page and in the report alike."""
    from shapelab.room import report

    m = _manifest()
    s = store.Store(f"sqlite:///{tmp_path / 'room.sqlite'}")
    lesson = m.lessons[1]
    t0 = time.mktime((2026, 12, 1, 10, 0, 0, 0, 0, -1))  # one morning: the half hour below never crosses midnight
    for i in (0, 5, 2):  # reached prompt 6, then ran prompt 3 again
        s.add("reveal", "ann", _reveal(lesson.id, i), at=t0 + i)
    s.add("reveal", "ben", _reveal(lesson.id, 0), at=t0)
    for k in range(3):  # ben works in the lab for 30 minutes
        s.add("check", "ben", _check(0, 0, passed=False), at=t0 + 600 * (k + 1))
    s.add("reveal", "cat", _reveal(lesson.id, 0), at=t0 + 1)  # cat is quiet since
    s.add("reveal", "ann", _reveal(lesson.id, 1), at=t0 + 1800)
    room = s.room(m, [], "", now=t0 + 1800)
    assert {p["user"]: p["reveal"]["index"] for p in room["positions"]} == {"ann": 5, "ben": 0, "cat": 0}
    quiet = {x["user"] for x in room["stuck"] if x["idle_min"] is not None}
    assert quiet == {"cat"}
    day = report.sessions(m, s, BANK)[learning.session_of(t0)]
    assert {x["user"] for x in day["stuck"] if x["idle_min"] is not None} == {"cat"}
    s.engine.dispose()


def test_the_page_refresh_reads_nothing_old_from_the_store(tmp_path):
    """api/room on every refresh: after the first read, the store answers from what it keeps (no query over the
    records), and a record stored since is in the next summary."""
    import sqlalchemy as sa

    m = _manifest()
    s = store.Store(f"sqlite:///{tmp_path / 'room.sqlite'}")
    lesson = m.lessons[1]
    assert s.room(m, [], "", bank=BANK)["learners"]["n"] == 0  # the page open before the first record
    for i in range(40):
        assert s.add("reveal", f"u{i}", _reveal(lesson.id, 0))
    assert s.add("inventory", "u0", _answer("A", BANK.items("A")[0].id, "pre", "a"))
    assert s.room(m, [], "", bank=BANK)["learners"]["n"] == 40
    statements = []
    sa.event.listen(s.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    s.add("reveal", "late", _reveal(lesson.id, 1))
    statements.clear()
    room = s.room(m, [], "", bank=BANK)
    assert _prompt(room, lesson.id, 1)["answered"] == 1
    assert not [q for q in statements if "FROM reveals" in q or "FROM checks" in q or "FROM inventory" in q], statements
    assert s.room(m, [], "", bank=BANK) is room  # a second tab within 2 s: the same summary
    s.engine.dispose()


def _simulate_room(service, rng: random.Random) -> list[dict]:
    """30 learners' kernels, three at a time, through the service: each asks its form, answers it before (30 %
    right) and the other form after (70 % right; the bank's last concept learned by nobody; its first three
    concepts not reached after), a wrong answer chosen among the item's distractors. Returns the answers sent."""
    from concurrent.futures import ThreadPoolExecutor

    learned_nothing = BANK.items("A")[-1].concept
    plans = {user: random.Random(rng.random()) for user in ROSTER}  # seeded per learner, whatever the threads do

    def take(user: str) -> list[dict]:
        kernel, mine, draw = Kernel(service, user), [], plans[user]
        first = kernel.request("GET", "/api/form")[1]["form"]
        for phase, form in (("pre", first), ("post", "B" if first == "A" else "A")):
            for it in BANK.items(form):
                if phase == "post" and it.concept in NOT_REACHED:
                    continue
                p = 0.3 if phase == "pre" or it.concept == learned_nothing else 0.7
                choice = it.key if draw.random() < p else draw.choice(sorted(it.ideas))
                record = _answer(form, it.id, phase, choice)
                assert kernel.request("POST", "/api/inventory", record)[0] == 201
                mine.append({"user": user, **record, "at": time.time()})
        kernel.conn.close()
        return mine

    with ThreadPoolExecutor(3) as pool:
        return [r for mine in pool.map(take, ROSTER) for r in mine]


def test_the_instructors_page_with_30_learners_in_chromium(service, browser):
    """30 simulated learners post the inventory before and after, a prompt and lab checks; the instructor's page
    at 1280 x 800 shows, above the fold, g per concept with its 95 % interval (the scorer's numbers from the
    answers sent) and the lab in progress; the concepts nobody answered folded into one line; below, each item's
    difficulty and its distractors' counts with the misconception each stands for; the report the same g."""
    rng = random.Random(35)
    sent = _simulate_room(service, rng)
    lesson = _manifest().lessons[1]
    service.post("reveal", "teach", _reveal(lesson.id, 1, predicted=None, measured="2", agreed=None))
    for i, user in enumerate(ROSTER):
        service.post("reveal", user, _reveal(lesson.id, 1, predicted=str(1 + i % 3), measured="2", agreed=i % 3 == 1))
        if i % 4 == 0:
            service.post("check", user, _check(0, i % 2, passed=i % 8 == 0))
    want = {row["concept"]: row for row in BANK.gains(sent)}  # the scorer on what was sent
    stats = {(row["item"], row["phase"]): row for row in BANK.item_stats(sent)}

    context = browser.new_context(viewport={"width": 1280, "height": 800},
                                  extra_http_headers={"Authorization": "token teach"})
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(service.url + "/")
        page.locator("#concepts tr[data-concept]").first.wait_for(timeout=10_000)
        rows = page.locator("#concepts tr[data-concept]")
        shown = [rows.nth(i).get_attribute("data-concept") for i in range(rows.count())]
        answered = [c for c, row in want.items() if row["n"]]
        taught = learning.concept_lessons(_manifest())
        assert shown == sorted((c for c in BANK.inventory.concepts() if c in answered), key=lambda c: taught.get(c, "~"))
        for concept in shown[:3] + shown[-1:]:
            cells = page.locator(f"#concepts tr[data-concept='{concept}'] td")
            row = want[concept]
            assert [cells.nth(i).inner_text() for i in (2, 3, 4, 6)] == [
                f"{round(100 * row['pre'])}%", f"{round(100 * row['post'])}%", f"{row['g']:.2f}", "30"]
            assert cells.nth(5).inner_text() == f"{row['lo']:.2f} to {row['hi']:.2f}"
        nothing = page.locator(f"#concepts tr[data-concept='{BANK.items('A')[-1].concept}'] td").nth(5).inner_text()
        low, high = map(float, nothing.split(" to "))
        assert low <= 0 <= high, nothing  # the concept nobody learned: 0 within its interval
        assert "15 A then B, 15 B then A" in page.locator("#inventory-notes").inner_text()
        # above the fold: the last concept row, its interval, and the lab in progress
        fold = lambda sel: page.locator(sel).bounding_box()  # noqa: E731
        last = fold(f"#concepts tr[data-concept='{shown[-1]}']")
        lab = _manifest().labs[0]
        table = fold(f'details.lab[data-lab="{lab.label}"] table')
        page.screenshot(path=str(SCREENSHOTS / "room_inventory_1280x800.png"))
        assert last["y"] + last["height"] <= 800 and table["y"] + table["height"] <= 800, (last, table)
        assert page.locator("#framed .question").is_visible()
        # the item statistics: every item answered, per phase, its share right and its distractors by misconception
        item = BANK.items("A")[0]
        row = stats[(item.id, "pre")]
        cells = page.locator(f"#items tr[data-item='{item.id}'][data-phase='pre'] td")
        assert cells.nth(4).inner_text() == f"{round(100 * row['difficulty'])}%"
        top = min((c for c, n in row["distractors"].items() if n), key=lambda c: (-row["distractors"][c], c))
        assert cells.nth(6).inner_text().startswith(f"{top} {row['distractors'][top]} · {item.ideas[top]}")
        assert page.locator("#items tr[data-item]").count() == len(stats)
        folded = page.locator("#empty-concepts")  # the concepts nobody answered on both forms: one closed line
        assert folded.locator("summary").inner_text() == "3 concepts with no learner on both forms yet"
        assert folded.get_attribute("open") is None and not page.locator(f"#concepts tr[data-concept='{NOT_REACHED[0]}']").count()
        # the framed prompt, judged by the instructor's run
        assert "the instructor's run: 2 · 10 right" in page.locator("#framed .measured").inner_text()
        page.screenshot(path=str(SCREENSHOTS / "room_inventory_1280x800.png"))
        page.screenshot(path=str(SCREENSHOTS / "room_inventory_full.png"), full_page=True)
        assert errors == []

        page.goto(service.url + "/report.html")
        cells = page.locator(f"#concepts tr[data-concept='{shown[0]}'] td")
        assert cells.nth(4).inner_text() == f"{want[shown[0]]['g']:.2f}"
        assert page.locator("#items tr[data-item]").count() == len(stats)
        page.screenshot(path=str(SCREENSHOTS / "room_report_inventory.png"), full_page=True)
    finally:
        context.close()


def test_a_room_with_no_inventory_answer_folds_every_concept(tmp_path, fake_hub):
    """Before anyone took the inventory: no concept table rows, every concept in the folded line's count."""
    room = Service(f"sqlite:///{tmp_path / 'room.sqlite'}", ["ann"])
    try:
        room.post("reveal", "ann", _reveal())
        inv = room.room()["inventory"]
        assert [c["n"] for c in inv["concepts"]] == [0] * len(BANK.inventory.concepts()) and inv["items"] == []
        assert json.loads(json.dumps(inv)) == inv  # what the page gets
    finally:
        room.close()


def test_a_learners_kernel_takes_the_inventory_in_the_room(service, monkeypatch, tmp_path):
    """The learner's side as it runs in a room (``labkit.inventory``: begin, answer): the kernel asks the room for
    its form and sends each answer; the room has the form it assigned and the first answer, the change kept."""
    import io
    from contextlib import redirect_stdout

    from shapelab.labkit import inventory
    from shapelab.room import client

    monkeypatch.setenv(client.URL_ENV, service.url)
    monkeypatch.setenv(client.TOKEN_ENV, "l07")  # the fake hub names the learner by the token's text
    monkeypatch.setenv("SHAPELAB_INVENTORY_FILE", str(tmp_path / "inventory.jsonl"))
    with redirect_stdout(io.StringIO()) as out:
        form = inventory.begin("pre")
        inventory.answer(1, "b")
        inventory.answer(1, "c")  # a change: the first counts
    assert "(room:" not in out.getvalue(), out.getvalue()
    assert form == service.app.settings["store"].forms()["l07"]
    stored = service.app.settings["store"].records("inventory", "l07")
    assert [(r["form"], r["item"], r["phase"], r["choice"]) for r in stored] == \
        [(form, BANK.items(form)[0].id, "pre", "b"), (form, BANK.items(form)[0].id, "pre", "c")]
    counted, left = learning.inventory_answers(stored, BANK)
    assert [r["choice"] for r in counted] == ["b"] and left["changed"] == 1
