"""Make each lab notebook from its solution, so the two never drift.

In a solution's code cells, the lines between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
are the answer. In the lab they become the region's stub: its ``# STUB: <code>`` lines,
uncommented at the same indentation (``...`` if it has none), under a ``# YOUR ANSWER HERE``
line. Markdown cells tagged ``solution`` are left out of the lab.

    python -m shapelab.labkit.labgen            # write labs/ from solutions/
    python -m shapelab.labkit.labgen --check    # exit 1 if labs/ is not what solutions/ make
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

BEGIN, END, STUB = "# BEGIN SOLUTION", "# END SOLUTION", "# STUB:"


class LabMarkerError(ValueError):
    """A solution's markers are unbalanced or nested."""


def strip_solution(source: str, where: str = "cell") -> str:
    """Replace every solution region in one code cell's source by its stub."""
    out: list[str] = []
    region: list[str] | None = None
    indent = ""
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if stripped == BEGIN:
            if region is not None:
                raise LabMarkerError(f"{where}, line {number}: nested {BEGIN}")
            region, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped == END:
            if region is None:
                raise LabMarkerError(f"{where}, line {number}: {END} without {BEGIN}")
            out.append(f"{indent}# YOUR ANSWER HERE")
            out.extend(region or [f"{indent}..."])
            region = None
        elif region is not None:
            if stripped.startswith(STUB):
                stub_indent = line[: len(line) - len(line.lstrip())]
                region.append(stub_indent + stripped[len(STUB):].strip())
        else:
            out.append(line)
    if region is not None:
        raise LabMarkerError(f"{where}: {BEGIN} without {END}")
    return "\n".join(out)


def make_lab(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The lab notebook for one solution notebook."""
    lab = copy.deepcopy(solution)
    cells = []
    for i, cell in enumerate(lab.cells):
        if cell.cell_type == "markdown" and "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = strip_solution(cell.source, f"{name}, cell {i}")
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    lab.cells = cells
    return lab


def lab_path(solution_path: Path, labs_dir: Path) -> Path:
    """Where the lab made from ``solution_path`` is stored: the same file name under ``labs_dir``."""
    return labs_dir / solution_path.name


def render(nb: nbformat.NotebookNode) -> str:
    """The exact text a notebook is stored as (stable, so --check can compare strings)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write labs/ from solutions/, or with --check report drift and return 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="course root (holds solutions/ and labs/)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    solutions, labs = args.root / "solutions", args.root / "labs"
    stale = []
    expected_names = set()
    for sol in sorted(solutions.glob("*.ipynb")):
        text = render(make_lab(nbformat.read(sol, as_version=4), sol.name))
        target = lab_path(sol, labs)
        expected_names.add(target.name)
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(str(target))
        else:
            labs.mkdir(exist_ok=True)
            target.write_text(text)
    extra = [str(p) for p in sorted(labs.glob("*.ipynb")) if p.name not in expected_names]
    if args.check and (stale or extra):
        for p in stale:
            print(f"out of date: {p} (run: python -m shapelab.labkit.labgen)")
        for p in extra:
            print(f"no solution for: {p}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
