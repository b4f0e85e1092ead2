import html

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from shapelab import batches, inductor_check, observe, parse_sizes, setup  # noqa: E402
from shapelab.labkit.widgets import (BUSY, DONE, LabBench, Steps, dropdown, int_slider, record_panes, text,  # noqa: E402
                                     to_html)


def _bench():
    seen = []

    def run(sizes, policy, feature):
        seen.append(policy)
        rec = observe(lambda x: x.sin(), batches(parse_sizes(sizes), feature), dynamic=policy)
        return record_panes(rec)

    bench = LabBench("demo", {"sizes": text("sizes", "4, 8"), "policy": dropdown("dynamic", [("None", None), ("True", True)]),
                              "feature": int_slider("features", 3, 1, 8)}, run, ["compiles", "reasons", "guards", "shapes"])
    return bench, seen


def test_bench_runs_and_updates_panes():
    bench, seen = _bench()
    assert bench.click() and bench.status.value == DONE and seen == [None]
    assert bench.controls["policy"].label == "None"  # the None option is shown, not an empty box
    assert "2 compile(s)" in bench.pane_text("compiles")
    assert "expected 4, actual 8" in bench.pane_text("reasons")
    bench.set(sizes="4, 8, 1", policy=True)
    assert bench.click()
    assert "counts after each call: [1, 1, 2]" in bench.pane_text("compiles")
    assert "#2: (1, " in bench.pane_text("shapes")  # batch 1 gets its own graph even under dynamic=True


def test_bench_turns_errors_into_messages_and_stays_usable():
    bench, _ = _bench()
    bench.set(sizes="4, -1")
    assert bench.click() is False
    assert "negative" in bench.status.value and not bench.button.disabled
    assert BUSY not in bench.status.value and bench.pane_text("compiles").strip() == "(press Run)"
    assert "Nothing has run yet" in bench.status.value and not bench.is_stale("compiles")
    bench.set(sizes="2, 3")
    assert bench.click() is True


def test_after_an_error_the_panes_say_they_show_the_last_successful_run():
    bench, _ = _bench()
    assert bench.click()
    good = bench.pane_text("compiles")
    bench.set(sizes="4, oops")
    assert bench.click() is False
    assert "still show the last successful run" in bench.status.value
    for name in bench.panes:
        assert bench.is_stale(name), name
        assert "Not updated: the last successful run; the current inputs raised an error" in bench.pane_text(name)
    assert "still show the last successful run (sizes='4, 8'" in html.unescape(bench.status.value)  # its inputs, said once
    assert good.strip() in bench.pane_text("compiles")  # the old figures stay readable, marked
    bench.set(sizes="2, 3")
    assert bench.click() and not any(bench.is_stale(n) for n in bench.panes) and bench.status.value == DONE


def test_a_clamped_control_is_named_in_the_status_line():
    bench, _ = _bench()
    assert bench.click()
    bench.set(feature=999)  # what the slider does with a typed 999: clamps it to its maximum
    assert bench.controls["feature"].value == 8
    assert bench.click()
    assert "Adjusted: 'features': 999 is outside 1..8, so it was set to 8" in bench.status.value
    assert bench.click() and bench.status.value == DONE  # said once, not forever
    bench.controls["feature"].slider.value = 1  # dragged to its minimum: nothing was changed for the learner
    assert bench.click() and "Adjusted" not in bench.status.value and bench.status.value == DONE
    bench.set(feature=8)  # typed, in range: no note either
    assert bench.click() and bench.status.value == DONE


def _plain_bench():
    """The same controls over a run that compiles nothing: for what the controls do, not what torch does."""
    return LabBench("demo", {"sizes": text("sizes", "4, 8"), "policy": dropdown("dynamic", [("None", None), ("True", True)]),
                             "feature": int_slider("features", 3, 1, 8)},
                    lambda **v: {"compiles": f"ran with {v}", "reasons": "-"}, ["compiles", "reasons"])


def test_text_typed_into_a_number_control_gets_a_note_and_changes_nothing():
    bench = _plain_bench()
    assert bench.click()
    for typed in ("abc", "2.5", "", "3 4"):
        bench.controls["feature"].box.value = typed  # as the front end sends what was typed into the box
        assert bench.controls["feature"].value == 3 and bench.controls["feature"].box.value == "3"
        assert f"Note: 'features': {typed.strip()!r} is not a whole number, so it stays at 3" in bench.status.value  # before Run
        assert "Adjusted" not in bench.status.value
        assert bench.click() and "is not a whole number" in bench.status.value
        assert bench.click() and bench.status.value == DONE
    bench.set(feature=" 5 ")
    assert bench.controls["feature"].value == 5 and "Adjusted" not in bench.status.value
    bench.controls["feature"].box.value = "abc"
    assert "not a whole number" in bench.status.value
    bench.controls["feature"].box.value = "6"  # a number typed after the refused text: that note no longer holds
    assert "not a whole number" not in bench.status.value and bench.click() and bench.status.value == DONE


def test_panes_are_marked_stale_when_inputs_change_without_run():
    bench = _plain_bench()
    bench.set(feature=4)
    assert not any(bench.is_stale(n) for n in bench.panes)  # nothing ran yet: nothing to mark
    assert bench.click()
    for change in ({"feature": 5}, {"sizes": "2, 3"}, {"policy": True}):
        bench.set(**change)
        assert all(bench.is_stale(n) for n in ("compiles", "reasons")) and "Inputs changed" in bench.status.value
        assert "Not updated: the inputs changed since this run; press Run" in bench.pane_text("compiles")
        assert "since the run shown (sizes=" in bench.status.value
        assert bench.click() and not any(bench.is_stale(n) for n in bench.panes)
    bench.set(feature=6)
    bench.set(feature=5)  # back to what the panes show: no longer stale
    assert not bench.is_stale("compiles") and bench.status.value == DONE


def test_a_slider_track_is_wide_enough_to_aim_with():
    from shapelab.labkit.widgets import TRACK_PX

    control = int_slider("n", 2, 1, 4)
    assert TRACK_PX >= 150 and control.slider.layout.width == f"{TRACK_PX}px" and control.slider.readout is False
    assert control.box.description == "n" and control.slider.description == ""  # the label sits on the box typed in


def test_a_pane_showing_a_table_takes_the_full_row():
    bench = LabBench("t", {"n": int_slider("n", 2, 1, 4)}, lambda n: {"table": [{"a": n}], "text": "x"}, ["table", "text"])
    assert bench.click()
    assert bench._boxes["table"].layout.min_width == "100%" and bench._boxes["text"].layout.min_width == "300px"


def test_run_may_add_a_note_to_the_status_line():
    bench = LabBench("t", {"n": int_slider("n", 2, 1, 4)}, lambda n: {"out": n, "_note": "sizes sorted"}, ["out"])
    assert bench.click() and "Note: sizes sorted." in bench.status.value and "_note" not in bench.panes


def test_dropdown_shows_none_as_a_selected_label():
    d = dropdown("dynamic=", [("None (default)", None), ("True", True), ("False", False)])
    assert d.index == 0 and d.value is None and d.label == "None (default)"
    d = dropdown("dynamic=", [True, None, False], None)
    assert d.label == "None" and d.value is None and d.index == 1
    d = dropdown("backend", ["eager", "inductor"])
    assert d.value == "eager"


def test_long_counts_are_a_step_plot_and_short_ones_are_printed():
    rec = observe(lambda x: x.sin(), batches([1 + i % 30 for i in range(60)], 3))
    panes = record_panes(rec)
    assert isinstance(panes["compiles"], Steps)
    html_ = to_html(panes["compiles"])
    assert "<svg" in html_ and "<polyline" in html_ and f"{rec.count} compile(s) over 60 call(s)" in html_
    assert str(rec.counts) not in html_
    short = record_panes(observe(lambda x: x.sin(), batches([4, 8], 3)))
    assert "counts after each call: [1, 2]" in short["compiles"]
    assert "(no calls)" in to_html(Steps([]))


def test_overlapping_tick_labels_are_thinned():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar([f"{1000 + i} µs" for i in range(40)], range(40))
    to_html(fig)
    visible = [t for t in ax.get_xticklabels() if t.get_visible()]
    assert 1 < len(visible) < 40


def test_to_html_renders_figures_tables_and_text():
    fig = plt.figure()
    assert "data:image/png;base64" in to_html(fig)
    assert "<table>" in to_html([{"a": 1}])
    assert "&lt;b&gt;" in to_html("<b>")


def test_setup_prints_environment(capsys):
    # inductor_check's real compile (about 13 s from its empty cache) is timed once, by the pre-flight's
    # test through its command (tests/test_preflight.py), and by lesson 00's run.
    dev, scale, backend = setup("cpu")
    out = capsys.readouterr().out
    assert scale == "ci" and dev.type == "cpu" and torch.__version__ in out and "CPU" in out


def test_inductor_check_reports_a_missing_compiler(monkeypatch, tmp_path):
    missing = str(tmp_path / "no-such-compiler")
    monkeypatch.setenv("CXX", missing)
    with torch._inductor.config.patch({"cpp.cxx": (missing,)}):
        check = inductor_check("cpu")
    assert not check.ok and "C++ compiler" in check.message


def test_benches_agree_with_their_lessons():
    """Lesson 01's bench at the recompile limit says the same in both panes; lesson 04's refuses a bucket larger
    than the longest request; lesson 07's refuses a graph budget above the recompile limit (and its slider stops
    there), and shows the replays' notes that its summary points to."""
    import pytest

    from shapelab.instruments import compat
    from shapelab.lessons import l01_guards, l04_buckets
    from shapelab.tools.doctor import bench as doctor_bench

    with torch._dynamo.config.patch(compat.recompile_limit_patch(2)):  # three shapes under dynamic=False hit it
        panes = l01_guards.run_bench(history="2x4, 3x4", batch=30, features=4, policy=False)
    assert "calls [2] ran eagerly" in panes["compiles"]
    assert "ran eagerly" in panes["last call"] and "reused" not in panes["last call"]
    with pytest.raises(ValueError, match="larger than the longest request"):
        l04_buckets.run_bench(max_len=16, strategy="multiple", k=32, distribution="uniform", requests=3)
    limit = compat.get_recompile_limit()
    work = {"w": (lambda x: x, lambda n, spread, seed: [])}
    with pytest.raises(ValueError, match=f"above the recompile limit \\({limit}\\)"):
        doctor_bench.run_bench(work, "w", budget=limit + 1)
    assert doctor_bench.build_bench(work).controls["budget"].max == limit

    class Replay:
        label, notes = "padded to buckets", ["the prediction missed: 3 graphs, not 2"]

    class Diagnosis:
        runs = [Replay()]

        def proof_table(self):
            return [{"replay": "padded to buckets", "prediction": "MISSED"}]

    shown = to_html(doctor_bench._with_notes(Diagnosis()))
    assert "MISSED" in shown and "notes:" in shown and "padded to buckets: the prediction missed: 3 graphs, not 2" in shown
