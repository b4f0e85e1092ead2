"""Run a lesson's "In your own code" cell as a learner would paste it: a fresh interpreter, no shapelab."""
import subprocess
import sys
from pathlib import Path

import nbformat

# Importing shapelab fails in the child, so a take-home cell that leans on the course fails loudly.
_NO_SHAPELAB = """
import importlib.abc, sys
class _NoCourse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "shapelab" or name.startswith("shapelab."):
            raise ModuleNotFoundError("the take-home cell must not import shapelab")
sys.meta_path.insert(0, _NoCourse())
"""


def takehome_source(notebook: Path) -> str:
    """The code cell that follows the markdown heading "In your own code" (exactly one per lesson)."""
    cells = nbformat.read(notebook, as_version=4).cells
    found = [i for i, c in enumerate(cells)
             if c.cell_type == "markdown" and "in your own code" in c.source.splitlines()[0].lower()]
    assert len(found) == 1, f"{notebook.name}: expected one markdown cell headed 'In your own code', found {len(found)}"
    code = [c for c in cells[found[0] + 1:] if c.cell_type == "code"]
    assert code, f"{notebook.name}: no code cell after 'In your own code'"
    return code[0].source


def run_takehome(notebook: Path, timeout: float = 120) -> str:
    """Run the take-home cell in a fresh interpreter where shapelab cannot be imported; return stdout."""
    src = takehome_source(notebook)
    assert "shapelab" not in src, f"{notebook.name}: the take-home cell mentions shapelab"
    result = subprocess.run([sys.executable, "-c", _NO_SHAPELAB + src], capture_output=True, text=True,
                            timeout=timeout, cwd=notebook.parent)
    assert result.returncode == 0, f"{notebook.name}'s take-home cell failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    return result.stdout
