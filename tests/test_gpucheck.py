"""The GPU check's CPU behaviour and its report writer (the GPU paths themselves need a CUDA machine)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from shapelab.tools import gpucheck as G


def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    out = tmp_path / "gc"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "shapelab.tools.gpucheck", str(out)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU found" in lines[0], proc.stdout
    assert "Triton" in lines[0] and "CUDA-graph" in lines[0] and "allocator" in lines[0] and "lessons" in lines[0]
    assert not out.exists(), "nothing should be written without a GPU"


def test_no_gpu_line_counts_the_lessons_it_finds():
    from shapelab.tools.fullrun import find_lessons

    assert f"each of the {len(find_lessons())} lessons" in G.no_gpu_line(len(find_lessons()))


def test_count_compiles_is_the_cpu_reference_the_gpu_counts_are_held_to():
    calls = [(torch.randn(n),) for n in (1000, 2048, 4096)]
    assert G.count_compiles(G.pointwise, calls, dynamic=False)[0] == 3
    assert G.count_compiles(G.pointwise, calls, dynamic=True)[0] == 1


def test_run_check_turns_failures_and_errors_into_rows(tmp_path):
    def fails(out, check):
        check.measured["graphs"] = "3 / 1"
        G._expect(False, "3 graph(s) on the GPU, 1 on the CPU")

    def breaks(out, check):
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    def holds(out, check):
        check.files.append(G._save(out, "k.py", "@triton.jit\ndef k(): pass"))

    failed = G.run_check("counts", "equal", fails, tmp_path)
    broken = G.run_check("capture", "works", breaks, tmp_path)
    good = G.run_check("kernels", "written", holds, tmp_path)
    assert failed.passed is False and "FAILED: 3 graph(s)" in failed.detail
    assert broken.passed is False and broken.detail == "ERROR RuntimeError: CUDA error: an illegal memory access"
    assert "Traceback" in (tmp_path / "errors" / "capture.txt").read_text()
    assert good.passed and (tmp_path / "triton" / "k.py").exists() and good.files == ["triton/k.py"]


def test_report_leads_with_the_verdict_and_lists_checks_measurements_and_lessons(tmp_path):
    checks = [G.Check("Inductor+Triton: pointwise", "counts equal", True, "held", 12.0,
                      {"graphs, dynamic=False (GPU / CPU)": "3 / 3"}, ["triton/pointwise_static.py"]),
              G.Check("CUDA graphs per size", "no skips", False, "FAILED: 2 CUDA-graph skip(s)", 3.0),
              G.Check("CUDA caching allocator", "runs")]
    lessons = [G.LessonResult("00_orientation", True, True, 40.0, "", 6, 0),
               G.LessonResult("03_recompile_limit", True, False, 10.0, "RuntimeError: boom", 0, 0),
               G.LessonResult("06_new", False)]
    path = G.write_report(tmp_path, checks, lessons, {"device": "GPU: H200"}, seconds=300, budget_s=470)
    text = path.read_text()
    first = text.splitlines()[2]
    assert first.startswith("**FAIL: 1 check(s) failed; 1 lesson(s) failed; 1 lesson(s) not run (time)**"), first
    assert "| CUDA caching allocator | runs | not run |" in text
    assert "3 / 3" in text and "`triton/pointwise_static.py`" in text and "GPU: H200" in text
    assert "FAILED: RuntimeError: boom" in text and "not run: out of time" in text
    data = json.loads((tmp_path / "gpucheck.json").read_text())
    assert [c["passed"] for c in data["checks"]] == [True, False, None] and len(data["lessons"]) == 3

    all_good = G.render_report(checks[:1], lessons[:1], {}, seconds=100, budget_s=470)
    assert "**PASS: every GPU path held and every lesson ran at full size**" in all_good
    unfinished = G.render_report(checks[:1], [], {}, seconds=100, budget_s=470, finished=False)
    assert "did not finish" in unfinished


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_paths_hold(tmp_path):
    for name, asserts, fn in G.CHECKS:
        check = G.run_check(name, asserts, fn, tmp_path)
        assert check.passed, f"{name}: {check.detail}"
