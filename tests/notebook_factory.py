"""Tiny notebooks for tests of the tools that run lessons."""
from pathlib import Path

import nbformat


def write_notebook(path: Path, cells) -> Path:
    """Write a tiny lesson for tests: ("md"|"params"|"code", source) cells, stored clean."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    for kind, src in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            meta = {"tags": ["parameters"]} if kind == "params" else {}
            nb.cells.append(nbformat.v4.new_code_cell(src, metadata=meta))
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
