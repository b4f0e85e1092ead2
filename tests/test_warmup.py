"""The warm-up: fills the Inductor cache it is given, and names the sections that stay cold on purpose."""
import json
import subprocess
import sys
from pathlib import Path

from notebook_factory import write_notebook

from shapelab.tools import warmup

ROOT = Path(__file__).resolve().parents[1]


TINY = [
    ("md", "# Tiny lesson"), ("params", 'SCALE = "auto"'),
    ("md", "## 1. Served warm"),
    ("code", "import torch\nf = torch.compile(lambda x: x.cos() * 2, backend='inductor')\nf(torch.ones(8))"),
    ("md", "## 2. Watch a compile\nThis one compiles from an empty cache on purpose."),
    ("code", "import shapelab as S\nwith S.isolated(fresh_inductor_cache=True):\n    pass"),
]


def test_warmup_fills_the_cache_and_lists_the_cold_sections(tmp_path):
    nbs, cache = tmp_path / "notebooks", tmp_path / "cache"
    write_notebook(nbs / "00_tiny.ipynb", TINY)
    result = subprocess.run([sys.executable, "-m", "shapelab.tools.warmup", "--notebooks", str(nbs), "--cache-dir", str(cache),
                             "--scale", "ci"], capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    files, size = warmup.cache_stats(cache)
    assert files > 0 and size > 0, "the Inductor compile in section 1 must leave files in the cache"
    assert "00_tiny · 2. Watch a compile (cell 5, took" in out
    assert "1. Served warm" not in out.split("on purpose")[1]
    assert f"TORCHINDUCTOR_CACHE_DIR={cache}" in out
    record = warmup.read_record(cache / warmup.RECORD)
    assert record["00_tiny"]["files added"] == files and record["00_tiny"]["key"]["scale"] == "ci"

    said = []  # a second warm-up into the same cache runs nothing, and says why
    again = warmup.warm([nbs / "00_tiny.ipynb"], scale="ci", cache_dir=cache, log=said.append)
    assert again["lessons"] == [] and list(again["skipped"]) == ["00_tiny"]
    assert said == [f"      skipped 00_tiny: already warmed into this cache ({files} file(s) added then)"]
    assert warmup.cache_stats(cache)[0] == files


def test_a_lesson_is_skipped_only_when_a_record_of_the_same_notebook_says_so(tmp_path):
    lesson = write_notebook(tmp_path / "00_x.ipynb", TINY)
    key = {"code": "0" * 16, "scale": "ci", "torch": "2.13.0", "device": "cpu"}
    same = dict(key)
    assert warmup.why_skip(lesson, same, {}, {}) is None  # no record: it runs
    assert "adds nothing" in warmup.why_skip(lesson, same, {}, {"00_x": {"key": key, "files added": 0}})
    assert warmup.why_skip(lesson, same, {}, {"00_x": {"key": key, "files added": 3}}) is None  # it fills the cache
    for changed in ({"code": "1" * 16}, {"scale": "full"}, {"torch": "2.14.0"}, {"device": "cuda"}):
        other = dict(key, **changed)  # an edited lesson, another scale, PyTorch or device: measured again
        assert warmup.why_skip(lesson, other, {}, {"00_x": {"key": key, "files added": 0}}) is None
        assert warmup.why_skip(lesson, other, {"00_x": {"key": key, "files added": 3}}, {}) is None
    assert "already warmed" in warmup.why_skip(lesson, same, {"00_x": {"key": key, "files added": 3}}, {})
    real = warmup.lesson_key(lesson, "auto")
    assert real["scale"] == {"cpu": "ci", "cuda": "full"}[real["device"]] and len(real["code"]) == 16
    prose = json.loads(lesson.read_text())
    prose["cells"][0]["source"] = "# Tiny lesson, reworded"
    assert warmup.code_hash(json.dumps(prose)) == real["code"]  # prose does not change what it compiles


def test_lists_lesson_00s_cold_compile_without_running_anything():
    result = subprocess.run([sys.executable, "-m", "shapelab.tools.warmup", "--list", "--only", "00"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "00_orientation" in result.stdout and "inductor_check" in result.stdout


def test_library_functions_that_use_an_empty_cache_are_found(tmp_path):
    names = warmup.library_fresh_functions()
    assert "inductor_check" in names
    assert not {"isolated", "observe", "setup"} & names  # they only offer the option
    (tmp_path / "mod.py").write_text(
        "def a():\n    with isolated(fresh_inductor_cache=True):\n        pass\n"
        "def b():\n    return a()\n"
        "def c(fresh_inductor_cache=False):\n    with isolated(fresh_inductor_cache=fresh_inductor_cache):\n        pass\n"
        "def d(check_inductor=False):\n    if check_inductor:\n        a()\n"
        "def e():\n    \"\"\"Times a compile that starts from an empty cache.\"\"\"\n"
        "def f(backend):\n    with Observer(fresh_inductor_cache=backend == 'inductor'):\n        pass\n"
        "def g():\n    return 1\n")
    assert warmup.library_fresh_functions(tmp_path) == {"a", "b", "e", "f"}


def test_fresh_sections_follow_functions_the_lesson_defines(tmp_path):
    path = write_notebook(tmp_path / "03_x.ipynb", [
        ("md", "# X"), ("params", 'SCALE = "auto"'),
        ("md", "## 1. Helper"),
        ("code", "import shapelab as S\ndef cold_compile():\n    with S.isolated(fresh_inductor_cache=True):\n        return 1"),
        ("md", "## 2. Use it"),
        ("code", "%time t = cold_compile()"),
        ("md", "## 3. Unrelated"),
        ("code", "y = 2"),
    ])
    spots = warmup.fresh_sections(path, fresh_names=set())
    assert [(s.section, s.cell) for s in spots] == [("1. Helper", 3), ("2. Use it", 5)]
    assert spots[1].line == "%time t = cold_compile()"
    assert not spots[1].said  # nothing near it tells the learner, and the listing says so
    assert "does not say so" in warmup.describe_spots(spots)
    assert "No lesson section" in warmup.describe_spots([])


def test_the_kept_record_is_of_the_lessons_as_they_are():
    """A CPU room skips what the kept record says adds nothing: a stale record would make it run every lesson."""
    kept = warmup.read_record(warmup.KEPT_RECORD)
    lessons = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))
    stale = [p.stem for p in lessons if kept.get(p.stem, {}).get("key", {}).get("code") != warmup.code_hash(p.read_text())]
    assert not stale, (f"tools/warmup_record.json is stale for {stale}: python -m shapelab.tools.warmup --scale ci --all "
                       "--cache-dir DIR && cp DIR/shapelab-warmup.json utils/shapelab/tools/warmup_record.json")
