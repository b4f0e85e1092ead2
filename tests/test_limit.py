"""shapelab.limit (lesson 03) against what PyTorch 2.13 measurably does at the recompile limit."""
import logging

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402
import torch  # noqa: E402

import shapelab as S  # noqa: E402
from shapelab.lessons import l03_limit as L  # noqa: E402

SHAPES = [torch.ones(n) for n in range(2, 14)]


def sin1(x):
    return x.sin() + 1


def test_quiet_dynamo_stderr_keeps_capture_and_restores_handlers(capfd):
    before = {n: list(logging.getLogger(n).handlers) for n in ("torch", "torch._dynamo")}
    with L.quiet_dynamo_stderr():
        rec = S.observe(sin1, SHAPES, dynamic=False)
        bare = torch.compile(sin1, backend="eager", dynamic=False)  # no capture handler at all
        for x in SHAPES:
            bare(x)
        torch.compiler.reset()
    assert rec.limit_hit and "recompile_limit (8)" in rec.warnings[0]
    assert "recompile_limit" not in capfd.readouterr().err  # not even logging's lastResort
    assert {n: list(logging.getLogger(n).handlers) for n in before} == before


def test_pointwise_block_keeps_shape():
    x = torch.randn(5, 7)
    assert L.pointwise_block(x).shape == x.shape


def test_time_fall_back_reads_the_path_from_the_record():
    inputs = [torch.randn(n, 16) for n in (32, 34, 36)]
    t = L.time_fall_back(L.pointwise_block, inputs, limit=2, backend="eager", repeats=3, inner=1)
    assert t.record.count == 2 and t.record.limit_hit
    assert [r["_path"] for r in t.rows] == ["compiled", "compiled", "fell back"]
    assert t.table()[2]["ran"] == "eager (limit hit)" and "_ratio" not in t.table()[0]
    assert t.ratio("fell back") > 0 and t.threads == 1
    with pytest.raises(ValueError, match="no shape"):
        t.ratio("eager")
    with pytest.raises(ValueError, match="at least one input"):
        L.time_fall_back(L.pointwise_block, [], limit=2)


def test_limit_names_and_aliases():
    rows = {r["older name"]: r for r in L.limit_names()}
    assert rows["cache_size_limit"]["value"] == 8 and rows["cache_size_limit"]["older name works"] == "yes (alias)"
    assert rows["accumulated_cache_size_limit"]["value"] == 256
    assert "recompile_limit=N" in rows["(none)"]["name here"]
    assert rows["FailOnCacheLimitHit"]["name here"].endswith("FailOnRecompileLimitHit")


def test_compile_kwarg_limit_counts():
    assert L.compile_kwarg_counts(sin1, SHAPES[:6], 3) == [1, 2, 3, 3, 3, 3]
    with pytest.raises(ValueError):
        L.compile_kwarg_counts(sin1, SHAPES, 0)


def test_accumulated_limit_is_kept_per_function():
    counts = L.accumulated_scope(shapes=7, accumulated=5, functions=2)
    assert counts == {"scope_a": [1, 2, 3, 4, 5, 5, 5], "scope_b": [1, 2, 3, 4, 5, 5, 5]}
    with pytest.raises(ValueError):
        L.accumulated_scope(accumulated=0)


def test_detect_all_matches_measured_behaviour():
    rows = {d.method: d for d in L.detect_all(sin1, SHAPES)}
    assert set(rows) == set(L.DETECTORS)
    assert not rows["warnings.catch_warnings"].noticed
    assert rows["counters"].noticed and "total 9, ok 8" in rows["counters"].detail
    assert rows["log handler"].noticed and "recompile_limit (8)" in rows["log handler"].detail
    for m in ("fail_on_recompile_limit_hit", "fullgraph=True"):
        assert rows[m].raised == "FailOnRecompileLimitHit" and rows[m].at_call == 8
    assert rows["set_stance after warm-up"].raised == "RuntimeError" and rows["set_stance after warm-up"].at_call == 1
    blind = rows["set_stance after the limit"]
    assert not blind.noticed and blind.fell_back == 6  # 4 from the run, 2 new shapes under the stance
    assert set(blind.row()) >= {"method", "noticed", "raised", "use it in"}
    assert L.detect("fullgraph=True", sin1, SHAPES[:5], limit=3).at_call == 3
    with pytest.raises(ValueError, match="unknown method"):
        L.detect("prayer", sin1, SHAPES)


def test_model_is_causal_so_end_padding_is_exact():
    model = L.make_model(8, seed=1)
    make = L.request_maker(8)
    x = make(5)
    padded = torch.nn.functional.pad(x, (0, 0, 0, 3))
    with torch.no_grad():
        assert torch.allclose(model(padded)[:, :5], model(x), atol=1e-6)
        assert torch.allclose(model(x.half(), torch.tensor(0.5)), model(x, 0.5), atol=1e-2)
    assert make(5).shape == (1, 5, 8) and torch.equal(make(5), make(5))
    assert isinstance(L.TinySeqModel(4), torch.nn.Module)
    with pytest.raises(ValueError):
        L.TinySeqModel(0)


def test_fix_policy_names_and_values():
    assert L.fix_policy("none") == {"strategy": "exact", "dynamic": False, "recompile_limit": 8}
    assert L.fix_policy("bucket128")["k"] == 128 and L.fix_policy("pow2")["strategy"] == "pow2"
    assert L.fix_policy("mark_dynamic")["marks"] == (S.Mark(1),)
    assert L.fix_policy("raise_limit", raised_limit=50)["recompile_limit"] == 50
    assert L.fix_policy("dynamic_true")["dynamic"] is True and L.fix_policy("default")["dynamic"] is None
    with pytest.raises(ValueError, match="unknown fix"):
        L.fix_policy("pray")


def test_serve_fixes_story_counts():
    model = L.make_model(8)
    lengths = S.request_lengths(40, 256, "uniform", distinct=20, seed=2)
    reps = L.serve_fixes(model, lengths, make_input=L.request_maker(8), max_len=256, warmup=[5, 9, 40],
                         fixes=["none", "bucket128", "mark_dynamic", "raise_limit", "dynamic_true"])
    none, buck, mark, raised, dyn = reps
    assert none.compiles == 8 and none.fell_back > 0 and none.record.limit_hit
    assert buck.compiles <= 3 and buck.fell_back == 0 and buck.padded_tokens > buck.tokens
    assert mark.compiles <= 2 and mark.fell_back == 0 and mark.record.compiles[-1].dynamic
    assert raised.compiles == len(set(lengths) | {5, 9, 40}) and raised.fell_back == 0 and "257" in raised.label
    assert dyn.compiles <= 2 and dyn.fell_back == 0
    d = L.diagnose(none.record, skip=3)
    assert d.calls == 40 and d.compiles == 8 and d.limit_hit and d.fell_back == none.fell_back
    assert d.reason_kinds == {"size of x, dim 1": 8} or d.reason_kinds == {"size of x, dim 1": 7}
    assert "recompile_limit (8)" in d.warning and len(d.lines()) == 3
    assert d.distinct_inputs == len(set(lengths))


def test_reason_kind_classifies_guard_failures():
    assert L.reason_kind("0/1: tensor 'x' size mismatch at index 1. expected 4, actual 8") == "size of x, dim 1"
    assert L.reason_kind("tensor 't' dtype mismatch. expected Float, actual Half") == "dtype of t"
    assert L.reason_kind("0/3: temperature == 0.71") == "value of temperature"
    assert L.reason_kind("0/2: self.step == 2  # self.step += 1") == "value of self.step"
    assert L.reason_kind("2 <= x.size()[0]  # the 0/1 rule") == "0/1 specialisation of x"
    assert L.reason_kind(None) == "first compile" and L.reason_kind("grad mode changed") == "other"


def test_other_causes_each_exhaust_the_limit():
    recs = L.other_causes()
    kinds = {"int argument (loop count)": "value of steps", "module attribute (step counter)": "value of self.step",
             "dtype flips (with batch 4, 8 and 1)": "dtype of t"}
    for name, rec in recs.items():
        assert rec.counts == [1, 2, 3, 4, 5, 6, 7, 8, 8, 8, 8, 8], name
        assert rec.fell_back == [8, 9, 10, 11], name
        assert L.reason_kind(rec.reasons[0]) == kinds[name]
    assert L.repeat_steps(torch.zeros(2), 0).sum() == 0
    counter = L.StepCounter(4)
    counter(torch.ones(1, 4))
    assert counter.step == 1


def test_trace_and_tlparse_summary(tmp_path):
    run = L.record_trace(tmp_path / "trace", requests=30, distinct=20)
    assert run.log is not None and run.log.exists() and run.compiles == 8 and run.fell_back > 0
    if L.tlparse_binary() is None:
        pytest.skip("tlparse is not installed here")  # installed with the course's environment
    out = L.run_tlparse(run.log, tmp_path / "report")
    summary = L.trace_summary(out)
    assert summary.graphs == 8 and len(summary.failures) == 1
    assert "recompile limit" in summary.failures[0]["outcome"].lower()
    assert all(L.reason_kind(r) == "size of x, dim 1" for r in summary.reasons)
    assert "graphs compiled: 8" in summary.lines()[0]
    with pytest.raises(FileNotFoundError):
        L.trace_summary(tmp_path)
    with pytest.raises(ValueError, match="distribution"):
        L.record_trace(tmp_path, distribution="zipf")


def test_bench_run_panes_and_bad_input():
    panes = L.bench_run(distinct=20, requests=30, limit=3)
    assert set(panes) == {"compiles", "reasons", "fell back", "latency", "bill"}
    assert panes["compiles"].startswith("3 compile(s) with the recompile limit at 3")
    assert any("recompile_limit (3)" in r for r in panes["reasons"])
    assert panes["fell back"].startswith("YES") and hasattr(panes["latency"], "savefig")
    with pytest.raises(ValueError, match="at most the maximum length"):
        L.bench_run(distinct=600)
    with pytest.raises(TypeError):
        L.bench_run(limit="8")


def test_bench_controls_change_panes():
    bench = L.make_bench(requests=30)
    assert bench.click(), bench.status.value
    first_compiles, first_reasons = bench.pane_text("compiles"), bench.pane_text("reasons")
    assert "with the recompile limit at 8" in first_compiles and "recompile_limit (8)" in first_reasons
    bench.set(limit=3)
    assert bench.click()
    assert bench.pane_text("compiles") != first_compiles and "limit at 3" in bench.pane_text("compiles")
    assert "hit config.recompile_limit (3)" in bench.pane_text("reasons")
    bench.set(fix="dynamic_true", limit=8)
    assert bench.click() and bench.pane_text("fell back").strip().startswith("no:")


def test_mystery_service_causes_and_checks():
    causes = {L.mystery_service(s)._cause for s in range(6)}
    assert causes == set(L.MYSTERY_CAUSES)
    svc = next(L.mystery_service(s) for s in range(6) if L.mystery_service(s)._cause == "temperature")
    traffic = svc.traffic(30)
    assert traffic == svc.traffic(30) and traffic != svc.traffic(30, seed=5)
    rec = svc.replay(traffic)
    assert rec.limit_hit and L.reason_kind(rec.reasons[0]) == "value of temperature"
    assert L.check_diagnosis(svc, True, "temperature")[0]
    assert not L.check_diagnosis(svc, None, None)[0]
    assert not L.check_diagnosis(svc, False, "temperature")[0]
    assert "not what varies" in L.check_diagnosis(svc, True, "lengths")[1]
    assert not L.check_diagnosis(svc, True, "moon")[0]
    assert L.check_fix(svc, lambda r: (svc.tensor(r), torch.tensor(r.temperature)), requests=30)[0]
    ok, msg = L.check_fix(svc, svc.default_args, requests=30)
    assert not ok and "still falls back" in msg
    ok, msg = L.check_fix(svc, lambda r: (svc.tensor(r) * 2, torch.tensor(r.temperature)), requests=10)
    assert not ok and "wrong answers" in msg
    assert not L.check_fix(svc, None)[0] and not L.check_fix(svc, 3)[0]
    ok, msg = L.check_fix(svc, lambda r: 1 / 0, requests=5)
    assert not ok and "ZeroDivisionError" in msg
    assert torch.equal(svc.reference(traffic[0]), svc.reference(traffic[0]))
    assert svc.default_args(traffic[0])[1] == traffic[0].temperature


def test_check_prediction_compares_with_a_replay():
    warm, lengths = [4, 9], [4, 5, 6, 7, 8, 10, 11, 12, 13, 5, 13]
    # graphs for 4, 9, 5, 6, 7, 8, 10, 11; then 12 and 13 (three requests) run eagerly
    assert L.check_prediction(3, lengths, warmup=warm)[0]
    ok, msg = L.check_prediction(2, lengths, warmup=warm)
    assert not ok and "measured 3 of 11" in msg
    assert not L.check_prediction(None, lengths)[0] and not L.check_prediction(2.0, lengths)[0]


def test_check_strict_runner_accepts_the_flag_and_rejects_the_rest():
    def flag(fn, inputs):
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            c = torch.compile(fn, backend="eager", dynamic=False)
            for x in inputs:
                c(x)

    def stance(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        c(inputs[0])
        with torch.compiler.set_stance("fail_on_recompile"):
            for x in inputs:
                c(x)

    def plain(fn, inputs):
        c = torch.compile(fn, backend="eager", dynamic=False)
        for x in inputs:
            c(x)

    assert L.check_strict_runner(flag)[0]
    assert "just 4 shapes" in L.check_strict_runner(stance)[1]
    assert "silently" in L.check_strict_runner(plain)[1]
    assert not L.check_strict_runner(None)[0] and not L.check_strict_runner("x")[0]


def test_patterns_and_choices():
    assert set(L.PATTERNS) == {"A", "B", "C"}
    ok, msg = L.check_choices({"A": "bucket128", "B": "raise_limit", "C": "mark_dynamic"})
    assert ok, msg
    ok, msg = L.evaluate_fix(L.PATTERNS["A"], "pow2")
    assert not ok and "fell back" in msg  # ten power-of-two buckets for 1..512: past the limit
    ok, msg = L.evaluate_fix(L.PATTERNS["B"], "bucket128")
    assert not ok and "padding is not allowed" in msg
    assert not L.evaluate_fix(L.PATTERNS["A"], "teleport")[0]
    assert not L.check_choices(None)[0] and not L.check_choices(["A"])[0]
    assert "no fix chosen" in L.check_choices({"A": "bucket128"})[1]
