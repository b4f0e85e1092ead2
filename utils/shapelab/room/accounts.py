"""Learners as OS users: each has a home of their own holding a copy of ``labs/``, the lessons
read-only in ``notebooks/``, and a copy of the room's warmed Inductor cache.

The hub runs as root and starts each learner's server as that learner (JupyterHub's
LocalProcessSpawner), so one learner's files and kernels are not another's. The warmed cache is
copied, not shared: a learner's kernel reads and writes only their own copy (Inductor writes locks
beside what it reads), so no learner can change what another learner's kernel loads.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CACHE = ".cache/shapelab-inductor"  # under the learner's home: TORCHINDUCTOR_CACHE_DIR


def ensure_user(name: str, homes: Path) -> pwd.struct_passwd:
    """The OS user ``name``, created (with a home under ``homes``) if missing."""
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} cannot be an OS user name: lower-case letters, digits, - and _, at most 32")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    homes.mkdir(parents=True, exist_ok=True)
    subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name), "--shell", "/bin/bash",
                    "--user-group", name], check=True, capture_output=True)
    return pwd.getpwnam(name)


def furnish(user: pwd.struct_passwd, course: Path, cache: Path | None = None) -> None:
    """Give ``user``'s home the course: ``labs/`` theirs to edit (copied once, never overwritten),
    ``notebooks/`` refreshed and read-only, and what the warmed cache holds that theirs lacks."""
    home = Path(user.pw_dir)
    labs = home / "labs"
    if not labs.exists():
        shutil.copytree(course / "labs", labs)
        _chown_tree(labs, user, dirs_only=False)
    notebooks = home / "notebooks"
    if notebooks.exists():
        _make_writable(notebooks)
        shutil.rmtree(notebooks)
    shutil.copytree(course / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for path in [notebooks, *notebooks.rglob("*")]:  # root's files, readable by all, writable by none
        path.chmod(0o555 if path.is_dir() else 0o444)
    if cache is not None and cache.is_dir():
        _copy_tree(cache, home / CACHE, user)
    os.chown(home, user.pw_uid, user.pw_gid)


def _copy_tree(src: Path, dst: Path, user: pwd.struct_passwd) -> None:
    """Copy what ``dst`` lacks from ``src``, owned by ``user`` (Inductor writes beside what it reads:
    locks, and artifacts it rewrites, so a learner's cache must be theirs, not links to root's files)."""
    for root, dirs, files in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            if not (target / f).exists():
                shutil.copy2(Path(root) / f, target / f)
    for parent in [dst, *(p for p in dst.parents if str(p).startswith(user.pw_dir + "/"))]:
        _chown_tree(parent, user, dirs_only=False) if parent == dst else os.chown(parent, user.pw_uid, user.pw_gid)


def _chown_tree(path: Path, user: pwd.struct_passwd, dirs_only: bool) -> None:
    for p in [path, *path.rglob("*")]:
        if not dirs_only or p.is_dir():
            os.chown(p, user.pw_uid, user.pw_gid)


def _make_writable(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)


def remove_user(name: str) -> None:
    """Delete the OS user and their home (the room's own tests clean up with it)."""
    subprocess.run(["userdel", "--remove", name], capture_output=True)


def reachable_by_all(path: Path) -> bool:
    """Whether any user can run ``path``: every folder on the way (links followed) is searchable by others."""
    path = Path(os.path.realpath(path))
    return all(os.stat(p).st_mode & 0o001 for p in [*reversed(path.parents), path]) and bool(os.stat(path).st_mode & 0o004)


def learner_python(python: str, where: Path) -> str:
    """A Python every learner can run with the course's packages: ``python`` itself when it is reachable,
    else a small environment in ``where`` made from the system's Python of the same version that
    reads the course's site-packages (a Python built under /root, as pyenv's, is not reachable)."""
    if reachable_by_all(Path(python)):
        return python
    probe = subprocess.run([python, "-c", "import sys, site; print(f'{sys.version_info[0]}.{sys.version_info[1]}');"
                            "print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True)
    version, site_packages = probe.stdout.split()
    system = Path(f"/usr/bin/python{version}")
    if not (system.exists() and reachable_by_all(system)):
        raise RuntimeError(f"learners cannot run {python} (a folder on its way is private) and there is no "
                           f"{system}: make the course's environment under a shared folder such as /opt")
    target = where / "bin" / "python"
    if not target.exists():
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
        own = subprocess.run([str(target), "-c", "import site; print(site.getsitepackages()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        # addsitedir also reads the .pth files there (the editable install of shapelab among them)
        Path(own, "shapelab-course.pth").write_text(f"import site; site.addsitedir({site_packages!r})\n")
    for p in [where, *where.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    return str(target)
