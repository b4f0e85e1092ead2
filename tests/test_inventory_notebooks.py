"""Where the inventory is taken: notebooks/inventory_before.ipynb (before lesson 01) and inventory_after.ipynb (after
lesson 07). They execute under nbval as the lessons do (not lessons: no parameters, bench, ledger or take-home
cell); they state the time a sitting takes, as measured, within 10 minutes; they show every item of the learner's
form, run no case and print no key; a learner's first answer is the one that counts, in their own file and, in a
room, at the service; the form before is kept, and the one after is the other."""
from __future__ import annotations

import http.server
import json
import re
import stat
import threading
from pathlib import Path

import nbformat
import pytest

from shapelab.labkit import inventory as inv
from shapelab.labkit import inventory_score as score
from shapelab.room import client
from test_notebooks import ARTIFACTS, assert_within_budget, failed_cells, run_nbval

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {"pre": ROOT / "notebooks" / "inventory_before.ipynb", "post": ROOT / "notebooks" / "inventory_after.ipynb"}
ANSWER = re.compile(r"^answer\((\d+), \.\.\.\)$")


@pytest.fixture
def learner(tmp_path, monkeypatch):
    """The learner's inventory file in a temp dir, a kernel with no state, and no room."""
    monkeypatch.setenv(inv.FILE_ENV, str(tmp_path / "home" / ".shapelab" / "inventory.jsonl"))
    monkeypatch.setattr(inv, "_state", {})
    monkeypatch.setattr(inv, "_kept", [])
    monkeypatch.delenv(client.URL_ENV, raising=False)
    return inv.path()


@pytest.mark.parametrize("phase", NOTEBOOKS)
def test_the_notebook_is_stored_clean_asks_every_item_and_states_its_measured_time(phase):
    nb = nbformat.read(NOTEBOOKS[phase], as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [c for c in code if c.get("outputs") or c.get("execution_count")], "stored with outputs"
    numbers = [int(m.group(1)) for c in code if (m := ANSWER.match(c.source.strip()))]
    assert numbers == list(range(1, len(inv.items("A")) + 1))
    assert f'begin("{phase}")' in code[0].source
    minutes, sentence = inv.taking_time(nb.cells, phase)
    assert sentence in nb.cells[0].source, f"the title should state: {sentence}"
    assert minutes <= inv.LIMIT_MINUTES
    # nothing on the page runs a case or names a key: the cases are shown only by answer(), from the library
    page = "\n".join(c.source for c in nb.cells)
    assert "measure(" not in page and ".key" not in page and "exec(" not in page
    assert not [it.id for it in inv.ITEMS.values() if it.case.splitlines()[0] in page]


@pytest.mark.parametrize("phase", NOTEBOOKS)
def test_the_notebook_executes_and_shows_each_item_without_its_key(phase):
    path = NOTEBOOKS[phase]
    run = run_nbval(path, artifacts=ARTIFACTS)
    assert run.nb is not None and run.returncode == 0 and not failed_cells(run.nb), run.stdout[-2000:]
    assert_within_budget(path, run)
    shown = [o["data"]["text/markdown"] for c in run.nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
             if "text/markdown" in o.get("data", {})]
    form = re.search(r"Form ([AB])", "".join(o.get("text", "") for o in run.nb.cells[1].outputs)).group(1)
    assert len(shown) == len(inv.items(form))
    for text, it in zip(shown, inv.items(form)):
        assert it.case in text and it.question in text and all(o in text for o in it.options)
        assert it.id not in text  # the learner sees a number: the id would tell which form, A or B
    printed = "\n".join(o.get("text", "") for c in run.nb.cells for o in c.get("outputs", []))
    assert not re.search(r"\b(key|correct|right answer)\b", printed, re.I)


def _run_cells(path: Path, answers: dict[int, str]):
    """Run the notebook's code cells in this process, the way a learner runs them one by one, ``answers`` put in
    place of ``...`` (IPython's display falls back to print)."""
    ns: dict = {}
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        m = ANSWER.match(cell.source.strip())
        source = f"answer({m.group(1)}, {answers[int(m.group(1))]!r})" if m and int(m.group(1)) in answers \
            else cell.source
        exec(compile(source, str(path), "exec"), ns)
    return ns


def test_the_first_answer_counts_and_the_after_form_is_the_other(learner, capsys):
    ns = _run_cells(NOTEBOOKS["pre"], {1: "c", 2: "E"})
    first = ns["form"]
    ns["answer"](1, "a")                                    # changed after: kept, not counted
    ns["answer"](3, "maybe")                                # not a letter: nothing kept
    out = capsys.readouterr().out
    assert "your first answer (c) is the one that counts" in out and "'maybe' is not one of the letters" in out
    assert stat.S_IMODE(learner.stat().st_mode) == 0o600 and stat.S_IMODE(learner.parent.stat().st_mode) == 0o700
    counted = {r["item"]: r["choice"] for r in score.first_answers(inv.responses())}
    assert counted == {f"{first}01": "c", f"{first}02": "e"}
    assert [r["choice"] for r in inv.responses() if r["item"] == f"{first}01"] == ["c", "a"]
    assert _run_cells(NOTEBOOKS["pre"], {})["form"] == first  # the form is kept in the file
    inv._state.clear()
    after = _run_cells(NOTEBOOKS["post"], {k: inv.items(inv.other(first))[k - 1].key for k in range(1, 21)})
    assert after["form"] == inv.other(first)
    out = capsys.readouterr().out
    assert "right before" in out and "automatic-dynamic" in out  # every item answered: the table is shown
    mine = {r["concept"]: r for r in score.learner(inv.responses())}
    assert mine["automatic-dynamic"]["post"] == (1, 1)


def test_the_summary_waits_for_every_item_after(learner, capsys):
    _run_cells(NOTEBOOKS["pre"], {1: "a"})
    inv._state.clear()
    _run_cells(NOTEBOOKS["post"], {1: "b"})
    out = capsys.readouterr().out
    assert "1 of 20 items answered after the lessons" in out and "right before" not in out


def test_an_unwritable_file_keeps_the_answers_in_the_kernel(learner, monkeypatch, capsys):
    learner.parent.parent.mkdir(parents=True)
    learner.parent.write_text("a file where the folder should be")
    ns = _run_cells(NOTEBOOKS["pre"], {1: "b"})
    ns["answer"](1, "c")
    out = capsys.readouterr().out
    assert "was not saved" in out and "first answer (b)" in out
    assert [r["choice"] for r in score.first_answers(inv.responses())] == ["b"]


class _Room(http.server.BaseHTTPRequestHandler):
    got: list = []

    def do_GET(self):  # noqa: N802
        self._reply({"user": "ada", "form": "B", "pre": "B", "post": "A"} if self.path == "/api/form" else {})

    def do_POST(self):  # noqa: N802
        _Room.got.append((self.path, self.headers["Authorization"],
                          json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self._reply({"ok": True})

    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_in_a_room_the_service_assigns_the_form_and_gets_each_answer(learner, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Room)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv(client.URL_ENV, f"http://127.0.0.1:{server.server_address[1]}/")
        monkeypatch.setenv(client.TOKEN_ENV, "learner-token")
        _Room.got = []
        ns = _run_cells(NOTEBOOKS["pre"], {4: "d"})
        assert ns["form"] == "B" and client.assigned_form() == "B"
        assert _Room.got == [("/api/inventory", "token learner-token",
                              {"form": "B", "item": "B04", "phase": "pre", "choice": "d", "id": _Room.got[0][2]["id"]})]
        inv._state.clear()
        assert _run_cells(NOTEBOOKS["post"], {})["form"] == "A"
        _Room.got = []
        _run_cells(NOTEBOOKS["post"], {k: "e" for k in range(1, 21)})  # every item: the table shows what scored
        marks = [body for path, _, body in _Room.got if body["choice"] is None]
        assert len(_Room.got) == 40 and sorted(m["item"] for m in marks) == [f"A{k:02d}" for k in range(1, 21)]
        assert all(m["phase"] == "post" for m in marks)  # the room leaves any later answer out as "after seeing"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
