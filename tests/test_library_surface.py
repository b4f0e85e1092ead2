"""The library's public surface: every public function and class documented; small helpers tested."""
import importlib
import inspect
import pkgutil

import pytest
import torch

import shapelab
from shapelab import Table, batches, compat, html_table, observe, text_table
from shapelab.instruments.serving import compare_policies, policy_presets


def _public_objects():
    for info in pkgutil.walk_packages(shapelab.__path__, "shapelab."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module.__name__}.{name}", obj


@pytest.mark.parametrize("name,obj", list(_public_objects()), ids=lambda v: v if isinstance(v, str) else "")
def test_public_function_or_class_has_a_docstring(name, obj):
    assert inspect.getdoc(obj), f"{name} needs a docstring"


def test_tables_render_as_html_and_text():
    rows = [{"a": 1, "b": 0.123456}, {"a": 22, "b": "x<y"}]
    assert "<th style='text-align:left'>a</th>" in html_table(rows) and "x&lt;y" in html_table(rows)
    assert text_table(rows).splitlines()[0].split() == ["a", "b"] and "0.123" in text_table(rows)
    assert str(Table(rows)) == text_table(rows) and Table(rows)._repr_html_() == html_table(rows)
    assert html_table([]) == "<p><i>(no rows)</i></p>"


def test_record_rows_summary_and_html():
    rec = observe(lambda x: x.cos(), batches([4, 8, 1, 16], 2))
    rows = rec.rows()
    assert [r["compiles"] for r in rows] == [1, 2, 3, 3]
    assert rows[1]["reason"].startswith("0/0: tensor 'x' size mismatch") and rows[0]["ran"] == "a new graph"
    assert rows[3]["ran"] == "a cached graph"  # a call that reused a graph does not read as compiled
    assert rec.summary().startswith("3 compile(s) over 4 call(s)")
    assert "<table>" in rec._repr_html_()
    assert rec.reasons == [e.reason for e in rec.compiles[1:]]


def test_policy_presets_and_compare_policies():
    presets = policy_presets(16)
    assert presets["specialise every shape"]["recompile_limit"] == 17
    reports = compare_policies(torch.tanh, [3, 5, 3, 9], make_input=lambda n: torch.ones(n), max_len=16,
                               policies=["specialise every shape", "bucket: powers of two"])
    assert [r.compiles for r in reports] == [3, 3]  # 3, 5, 9 exactly; buckets 4, 8, 16
    assert reports[1].padded_tokens == 4 + 8 + 4 + 16
    with pytest.raises(ValueError, match="unknown policy"):
        compare_policies(torch.tanh, [3], make_input=torch.ones, max_len=16, policies=["magic"])


def test_differs_from_pin_names_both_versions(monkeypatch):
    monkeypatch.setattr(torch, "__version__", compat.PINNED + "+cpu")
    assert compat.differs_from_pin() is None  # any build of the pinned release
    monkeypatch.setattr(torch, "__version__", "2.14.0")
    assert "2.14.0" in compat.differs_from_pin() and compat.PINNED in compat.differs_from_pin()


def test_as_args_wraps_single_arguments_only():
    from shapelab.instruments.observe import as_args

    x = torch.ones(2)
    assert as_args(x) == (x,) and as_args((x, 3)) == (x, 3) and as_args(5) == (5,)
