"""The version matrix: the whole test suite on one PyTorch release, and a record of what it showed.

    python -m shapelab.tools.matrix --torch 2.15.0                      # build a venv, run, write the record
    python -m shapelab.tools.matrix --torch 2.15.0 --wheels /work/wheels  # torch from a folder of wheels (offline)
    python -m shapelab.tools.matrix --table                             # redo the comparisons and the README table

A run builds (or reuses) a venv under ``build/matrix/venv-<release>`` with ``requirements.txt``' pins and that
release of torch, exports the commit under test (``git archive``, HEAD by default) to ``build/matrix/<release>/src``
and runs ``pytest`` there, exactly as ``.ci/run`` does on the pin: every lesson, solution and lab through
tests/test_notebooks.py at CI size, and every unit test. It then writes ``versions/torch-<release>.json``:
notebooks passing, unit tests passed/failed, the failures, and the figures the run measured (each ``S.reveal``
line "the run measured ..." of the executed notebooks and each claims-ledger row, timings masked), compared
with the pinned release's record. The README's "Versions" table is made from those records, and
tests/test_matrix.py fails when pyproject.toml claims a release no passing record covers.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

from ..instruments import compat
from ..instruments.timing import NOT_DISTINGUISHABLE

ROOT = Path(__file__).resolve().parents[3]
RECORDS = "versions"
PINNED = "2.13.0"  # requirements.txt's torch pin; tests/test_matrix.py checks that the two agree
NOTEBOOK_TESTS = ("test_lesson_executes_under_nbval", "test_solution_passes_every_check",
                  "test_untouched_lab_fails_every_check")
TABLE_BEGIN, TABLE_END = "<!-- matrix table: made by python -m shapelab.tools.matrix --table -->", "<!-- end of matrix table -->"
REVEAL = re.compile(r"the run measured (.+?)(?:: (?:as you predicted|not what you predicted))?\.\s*$", re.M)
# What varies from run to run on one release: timings and other decimals, memory. Masked before comparing.
TIMING = re.compile(r"\d+(?:\.\d+)?\s*(?:ms|µs|us|ns|s|x|%|MB|KB|GB|MiB|KiB)(?![\w])|\d+\.\d+")
BUILD = re.compile(r"\+(?:cpu|cu\d+|rocm[\d.]+|xpu)\b")  # a wheel's build tag: the same release on another index
RELEASE = re.compile(r"PyTorch (?:#|\d+\.\d+)\.\d+")  # a figure that names the release it ran on (2.13 masked as #)
SET_OF_WORDS = re.compile(r"\{('[^'{}]*'(?:, '[^'{}]*')+)\}")  # a printed set of strings: its order varies by process
# The course's timing rule words each verdict so (timing.Comparison): one on a shared machine may go either way.
# A figure derived from a verdict names it shorter ("'not distinguishable' (requests before ... pay back)").
TIMING_VERDICT = re.compile(rf"{NOT_DISTINGUISHABLE}|'not distinguishable'|is (?:slower|faster) than")


# --- what a run measured -------------------------------------------------------------------------------

def mask_timings(text: str) -> str:
    """``text`` with every timing, ratio and decimal as ``#``: what stays is counts and words."""
    return TIMING.sub("#", text)


def notebook_figures(nb: dict, name: str) -> dict[str, str]:
    """``{"<name> [cell id] #k": "<what the run measured>"}`` for each ``S.reveal`` line an executed notebook printed."""
    figures = {}
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        text = "".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                       for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for k, m in enumerate(REVEAL.finditer(text)):
            figures[f"{name} [{cell.get('id') or index}] #{k}"] = mask_timings(m.group(1))
    return figures


def ledger_figures(ledger: dict) -> dict[str, str]:
    """``{"<lesson> ledger: <topic>": "<measured, timings masked>"}`` for one saved claims ledger."""
    return {f"{ledger.get('lesson')} ledger: {c['topic']}": mask_timings(str(c["measured"]))
            for c in ledger.get("claims", [])}


def collect_figures(artifacts: Path) -> dict[str, str]:
    """Every figure of a run's ``test-artifacts``: the executed notebooks' reveals and the saved ledgers."""
    figures: dict[str, str] = {}
    for path in sorted((artifacts / "executed").glob("*.ipynb")):
        figures.update(notebook_figures(json.loads(path.read_text()), path.stem))
    for path in sorted((artifacts / "ledger").glob("*/*.json")):
        figures.update(ledger_figures(json.loads(path.read_text())))
    return figures


def comparable(figure: str) -> str:
    """A figure as two runs of the same behaviour print it alike: no release or build tag, a set's words in order."""
    figure = RELEASE.sub("PyTorch <release>", BUILD.sub("", figure))
    return SET_OF_WORDS.sub(lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", figure)


def compare(figures: dict[str, str], pinned: dict[str, str]) -> list[dict]:
    """Each figure both runs printed that differs from the pinned run's (a figure one run lacks is not a
    difference of behaviour: a cell that failed, or a run that did not reach it; the failures say which).
    Each is marked ``timing`` when either side is a timing verdict (the other then a verdict the other way, or a
    figure derived from one, such as a break-even): on a shared CPU those move between two runs of one release
    too, so they are listed apart from the counts."""
    return [{"figure": key, "pinned": pinned[key], "this": figures[key],
             "timing": bool(TIMING_VERDICT.search(pinned[key]) or TIMING_VERDICT.search(figures[key]))}
            for key in sorted(set(figures) & set(pinned)) if comparable(figures[key]) != comparable(pinned[key])]


# --- what pytest said ------------------------------------------------------------------------------------

def read_junit(xml_text: str) -> dict:
    """Notebooks and unit tests passed/failed from pytest's ``--junitxml``, with each failure's first line."""
    notebooks = {"passed": 0, "total": 0, "failed": []}
    unit = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failures = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        test = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        bad = next((c for c in case if c.tag in ("failure", "error")), None)
        skipped = any(c.tag == "skipped" for c in case)
        if bad is not None:
            first = (bad.get("message") or bad.text or "").strip().splitlines()
            failures.append({"test": test, "kind": bad.tag, "message": (first[0] if first else "")[:300]})
        if case.get("name", "").split("[")[0] in NOTEBOOK_TESTS:
            notebooks["total"] += 1
            if bad is None and not skipped:
                notebooks["passed"] += 1
            else:
                notebooks["failed"].append(case.get("name").split("[", 1)[-1].rstrip("]"))
        elif bad is not None:
            unit["failed" if bad.tag == "failure" else "errors"] += 1
        elif skipped:
            unit["skipped"] += 1
        else:
            unit["passed"] += 1
    return {"notebooks": notebooks, "unit_tests": unit, "failures": failures}


def passes(record: dict) -> bool:
    """A release passes when its run finished, every notebook ran as on the pin and no unit test failed or errored."""
    nb, unit = record["notebooks"], record["unit_tests"]
    return (record.get("complete", False) and nb["total"] > 0 and nb["passed"] == nb["total"]
            and unit["failed"] == 0 and unit["errors"] == 0)


# --- records, the claimed range and the README table ----------------------------------------------------

def load_records(root: Path = ROOT) -> list[dict]:
    """Every record under versions/, oldest release first."""
    records = [json.loads(p.read_text()) for p in (root / RECORDS).glob("torch-*.json")]
    return sorted(records, key=lambda r: _release_key(r["release"]))


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", release.split("+")[0])[:3])


def claimed_range(pyproject_text: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The torch range pyproject.toml claims, as ``((2, 11), (2, 16))``: lowest minor included, highest excluded."""
    m = re.search(r'"torch\s*>=\s*(\d+)\.(\d+)\s*,\s*<\s*(\d+)\.(\d+)"', pyproject_text)
    if not m:
        raise ValueError('pyproject.toml must state torch as "torch>=A.B,<C.D"')
    a, b, c, d = map(int, m.groups())
    return (a, b), (c, d)


def minors_in(low: tuple[int, int], high: tuple[int, int]) -> list[tuple[int, int]]:
    """The minor releases from ``low`` up to, not including, ``high`` (one major)."""
    if low[0] != high[0]:
        raise ValueError("a range across majors cannot be listed minor by minor")
    return [(low[0], m) for m in range(low[1], high[1])]


def unbacked_claims(pyproject_text: str, records: list[dict]) -> list[str]:
    """The minor releases pyproject.toml claims for which no record shows a passing run."""
    passing = {_release_key(r["release"])[:2] for r in records if passes(r)}
    return [f"{a}.{b}" for a, b in minors_in(*claimed_range(pyproject_text)) if (a, b) not in passing]


def with_comparisons(records: list[dict]) -> list[dict]:
    """The records with ``count_differences`` recomputed against the pinned release's record (if there is one)."""
    pinned = next((r for r in records if r["release"] == PINNED), None)
    for r in records:
        r["count_differences"] = compare(r.get("figures", {}), pinned["figures"]) if pinned else None
    return records


def timing_verdicts(differences: list[dict] | None) -> int:
    """How many of a record's differences are timing verdicts (``compare`` marks them)."""
    return sum(d.get("timing", False) for d in differences or [])


def table(records: list[dict]) -> str:
    """The README's table: one row per record."""
    rows = ["| PyTorch | run on | commit | notebooks passing | unit tests passed / failed | figures that differ from "
            f"{PINNED} | passes |", "|---|---|---|---|---|---|---|"]
    pinned_figures = next((r.get("figures", {}) for r in records if r["release"] == PINNED), {})
    for r in records:
        nb, unit, diff = r["notebooks"], r["unit_tests"], r.get("count_differences")
        both = len(set(r.get("figures", {})) & set(pinned_figures))
        timing = timing_verdicts(diff)
        differ = ("(this is the pin)" if r["release"] == PINNED else "no pinned record" if diff is None
                  else f"{len(diff) - timing} of {both} both runs printed" + (f", and {timing} timing verdict{'s' if timing > 1 else ''}" if timing else "")
                  + (f" (`{RECORDS}/torch-{r['release']}.json`)" if diff else ""))
        left_out = "".join(f" (`{a}`)" for a in r.get("pytest_args", []))
        if not r.get("complete", False):
            differ += "; the run did not finish: " + r.get("note", f"pytest exit {r.get('pytest_exit')}")
        rows.append(f"| {r['torch']} | {r['date'][:10]} | `{r['commit'][:8]}` | {nb['passed']} / {nb['total']} | "
                    f"{unit['passed']} / {unit['failed'] + unit['errors']}{left_out} | {differ} | {'yes' if passes(r) else 'no'} |")
    return "\n".join(rows)


def replace_table(readme: str, new_table: str) -> str:
    """``readme`` with the text between the table markers replaced by ``new_table``."""
    start, end = readme.find(TABLE_BEGIN), readme.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no matrix table markers ({TABLE_BEGIN!r} ... {TABLE_END!r})")
    return readme[:start + len(TABLE_BEGIN)] + "\n" + new_table + "\n" + readme[end:]


def write_all(root: Path = ROOT) -> list[dict]:
    """Recompute every record's comparison with the pin, rewrite the records and the README table."""
    records = with_comparisons(load_records(root))
    for r in records:
        (root / RECORDS / f"torch-{r['release']}.json").write_text(json.dumps(r, indent=1, ensure_ascii=False) + "\n")
    readme = root / "README.md"
    readme.write_text(replace_table(readme.read_text(), table(records)))
    return records


# --- one run ---------------------------------------------------------------------------------------------

def _sh(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def requirements_for(release: str, requirements: str) -> str:
    """requirements.txt with ``torch==<release>`` for the pin and without the editable course itself."""
    lines = [line for line in requirements.splitlines()
             if not re.match(r"\s*torch\s*==", line) and not line.strip().startswith("-e")]
    return "\n".join([f"torch=={release}"] + lines) + "\n"


def build_venv(release: str, venv: Path, wheels: Path | None) -> None:
    """A venv with ``requirements.txt``' pins and torch ``release``; reused when it already has that torch.

    ``PIP_CONSTRAINT`` is replaced by ``torch==<release>`` for these pip calls, so a global pip constraint
    does not veto the release. Torch comes from ``wheels`` when given (pip prefers a local file of the same
    version, and the release's dependencies were downloaded beside it), else from the registry.
    """
    python, done = venv / "bin" / "python", venv / "matrix-complete"
    reuse = False
    if done.exists():
        have = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        reuse = have.returncode == 0 and have.stdout.strip().split("+")[0] == release
    if not reuse:
        shutil.rmtree(venv, ignore_errors=True)
        _sh([sys.executable, "-m", "venv", venv])
    reqs = venv / "matrix-requirements.txt"
    reqs.write_text(requirements_for(release, (ROOT / "requirements.txt").read_text()))
    constraint = venv / "matrix-constraints.txt"
    constraint.write_text(f"torch=={release}\n")
    env = dict(os.environ, PIP_CONSTRAINT=str(constraint), PIP_DISABLE_PIP_VERSION_CHECK="1")
    links = ["--find-links", str(wheels)] if wheels else []
    if not reuse:
        _sh([python, "-m", "pip", "install", "-q", "pip==26.3"], env=env)  # as the README's commands: 65 s -> 24 s
        _sh([python, "-m", "pip", "install", "-q", *links, f"torch=={release}"], env=env)
    _sh([python, "-m", "pip", "install", "-q", *links, "-r", reqs], env=env)  # a reused venv gets new pins too
    done.write_text(release + "\n")  # only a venv that finished installing is reused


def export_tree(commit: str, dest: Path) -> str:
    """The files of ``commit`` in ``dest`` (emptied first); returns the full commit id."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", commit], check=True, capture_output=True, text=True).stdout.strip()
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", ROOT, "archive", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", dest], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {sha} failed")
    return sha


def run_release(release: str, wheels: Path | None, commit: str = "HEAD", work: Path | None = None,
                timeout: float = 3600, pytest_args: Sequence[str] = ()) -> dict:
    """Build the venv, run the pytest suite on ``commit`` with that torch, write and return the record.

    ``pytest_args`` (e.g. ``--ignore=tests/test_browser.py``) are passed on and kept in the record."""
    work = work or ROOT / "build" / "matrix"
    venv, run_dir = work / f"venv-{release}", work / release
    build_venv(release, venv, wheels)
    src = run_dir / "src"
    sha = export_tree(commit, src)
    site = subprocess.run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "shapelab-matrix.pth").write_text(str(src / "utils") + "\n")  # the exported library, as `-e .` would
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env[compat.TRY_ENV] = "1"  # a release below the range is run too: that is how it can join it
    junit = run_dir / "junit.xml"
    junit.unlink(missing_ok=True)
    start = time.time()
    with (run_dir / "pytest.log").open("w") as log:
        try:
            code = subprocess.run([venv / "bin" / "python", "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q",
                                   f"--junitxml={junit}", *pytest_args], cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = round(time.time() - start)
    probe = subprocess.run([venv / "bin" / "python", "-c", "import json, torch; from shapelab import compat; "
                            "print(json.dumps([torch.__version__, compat.release_differences()]))"],
                           capture_output=True, text=True, cwd=src, env=env)
    torch_version, moved = json.loads(probe.stdout.strip().splitlines()[-1]) if probe.returncode == 0 else ("?", [])
    result = read_junit(junit.read_text()) if junit.exists() else {
        "notebooks": {"passed": 0, "total": 0, "failed": []}, "unit_tests": {"passed": 0, "failed": 0, "errors": 1, "skipped": 0},
        "failures": [{"test": "pytest", "kind": "error", "message": f"no junit report (exit {code}); see {run_dir / 'pytest.log'}"}]}
    record = {"release": release, "torch": torch_version, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "commit": sha, "complete": code in (0, 1), "compat_differences": moved, "pytest_args": list(pytest_args), "pytest_exit": code, "seconds": seconds, **result,
              "figures": collect_figures(src / "test-artifacts")}
    out = ROOT / RECORDS / f"torch-{release}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    write_all()
    return json.loads(out.read_text())


def main(argv=None) -> int:
    """The command line: run one release (``--torch``) and write its record, or rewrite the README's table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", help="the release to run, e.g. 2.15.0")
    parser.add_argument("--wheels", type=Path, default=os.environ.get("SHAPELAB_WHEELS"),
                        help="a folder of wheels (torch and its dependencies) to install from first")
    parser.add_argument("--commit", default="HEAD", help="the commit to test (default HEAD)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds pytest may take")
    parser.add_argument("--table", action="store_true", help="only redo the comparisons and the README table")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest and kept in the record")
    args = parser.parse_args(argv)
    if args.table:
        records = write_all()
    elif args.torch:
        records = [run_release(args.torch, args.wheels, args.commit, timeout=args.timeout, pytest_args=args.pytest_args)]
    else:
        parser.error("give --torch RELEASE or --table")
    for r in records:
        print(f"{r['torch']}: notebooks {r['notebooks']['passed']}/{r['notebooks']['total']}, unit tests "
              f"{r['unit_tests']['passed']} passed, {r['unit_tests']['failed'] + r['unit_tests']['errors']} failed, "
              f"{len(r['count_differences'] or [])} figures differ from {PINNED} "
              f"({timing_verdicts(r['count_differences'])} of them timing verdicts), passes: {passes(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
