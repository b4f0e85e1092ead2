import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from shapelab import batches, inductor_check, observe, parse_sizes, setup  # noqa: E402
from shapelab.labkit.widgets import BUSY, DONE, LabBench, dropdown, int_slider, record_panes, text, to_html  # noqa: E402


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
    bench.set(sizes="2, 3")
    assert bench.click() is True


def test_to_html_renders_figures_tables_and_text():
    fig = plt.figure()
    assert "data:image/png;base64" in to_html(fig)
    assert "<table>" in to_html([{"a": 1}])
    assert "&lt;b&gt;" in to_html("<b>")


def test_setup_prints_environment_and_inductor_check(capsys):
    dev = setup("cpu")
    out = capsys.readouterr().out
    assert dev.type == "cpu" and torch.__version__ in out and "CPU" in out
    check = inductor_check("cpu")
    assert check.ok and check.seconds > 0, check.message


def test_inductor_check_reports_a_missing_compiler(monkeypatch, tmp_path):
    missing = str(tmp_path / "no-such-compiler")
    monkeypatch.setenv("CXX", missing)
    with torch._inductor.config.patch({"cpp.cxx": (missing,)}):
        check = inductor_check("cpu")
    assert not check.ok and "C++ compiler" in check.message
