"""Run a lesson's "In your own code" cell as a learner would paste it: a fresh interpreter, no shapelab.

Each cell runs in a child forked from a server, a fresh interpreter that has imported torch and nothing else (one
per test process): the cell starts from a process with no compile state and no course library, and the suite
pays torch's import (about 3 s of CPU) once per test process instead of once per lesson.
Every take-home cell imports torch first and sets no environment variable before it (an assert checks the latter).
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
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

# The fork server: a fresh interpreter that imports torch, then forks one child per cell it reads from stdin
# (a JSON line: source, folder, stdout file, stderr file) and answers each with the child's exit status.
_SERVER = _NO_SHAPELAB + r"""
import json, os, sys, traceback
import torch
for line in sys.stdin:
    source, cwd, out, err = json.loads(line)
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
        os.chdir(cwd)
        code = 0
        try:
            exec(compile(source, "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (e.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
_server = None


def _fork_server() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        # a session of its own: its forked children share its process group, so a timeout stops them with it
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, start_new_session=True)
    return _server


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
    assert "environ" not in src, f"{notebook.name}: the take-home cell sets the environment, after torch's import here"
    server = _fork_server()
    with tempfile.TemporaryDirectory(prefix="takehome-") as folder:
        out, err = Path(folder) / "out", Path(folder) / "err"
        out.touch()
        err.touch()
        server.stdin.write(json.dumps([src, str(notebook.parent), str(out), str(err)]) + "\n")
        server.stdin.flush()
        answer = [None]
        reader = threading.Thread(target=lambda: answer.__setitem__(0, server.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():  # the cell hangs: stop the server and its child; the next cell starts another
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            raise subprocess.TimeoutExpired(f"{notebook.name}'s take-home cell", timeout)
        stdout, stderr = out.read_text(), err.read_text()
    assert answer[0] and int(answer[0]) == 0, f"{notebook.name}'s take-home cell failed:\n{stdout}\n{stderr[-3000:]}"
    return stdout
