"""Learners as OS users, and what their servers may read.

Each learner has a home of their own (0700), holding a copy of ``labs/``, the lessons read-only in
``notebooks/`` and a copy of the room's warmed Inductor cache; everything a learner owns there is
made private at every server start (the hub starts servers with umask 077, and this fixes what an
older room left readable). Learners never read the repository: their servers run ``learner_env``,
a Python of its own beside the room's state holding links to the course's packages, and a copy of
the course with only ``notebooks/``, ``labs/`` and the library (``course_copy``).

The hub runs as root and starts each learner's server as that learner (JupyterHub's
LocalProcessSpawner). The warmed cache is copied, not shared: a learner's kernel reads and writes
only their own copy (Inductor writes locks beside what it reads), so no learner can change what
another learner's kernel loads.
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
from pathlib import Path

NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
CACHE = ".cache/shapelab-inductor"  # under the learner's home: TORCHINDUCTOR_CACHE_DIR
SHARED = ("notebooks", "labs")       # what learners get of the course, beside the library
SKIP = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.pyc")


def ensure_user(name: str, homes: Path) -> pwd.struct_passwd:
    """The OS user ``name``, created (with a home under ``homes``) if missing; an existing one is kept."""
    if not NAME.fullmatch(name):
        raise ValueError(f"{name!r} cannot be an OS user name: lower-case letters, digits, - and _, at most 32")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    homes.mkdir(parents=True, exist_ok=True)
    subprocess.run(["useradd", "--create-home", "--home-dir", str(homes / name), "--shell", "/bin/bash",
                    "--user-group", "-K", "UMASK=077", name], check=True, capture_output=True)
    return pwd.getpwnam(name)


def furnish(user: pwd.struct_passwd, course: Path, cache: Path | None = None) -> None:
    """Give ``user``'s home the course: ``labs/`` theirs to edit (copied once, never overwritten),
    ``notebooks/`` refreshed and read-only, what the warmed cache holds that theirs lacks; then make
    the home and everything the learner owns in it private."""
    home = Path(user.pw_dir)
    labs = home / "labs"
    if not labs.exists():
        shutil.copytree(course / "labs", labs, ignore=SKIP)
        _chown_tree(labs, user)
    notebooks = home / "notebooks"
    if notebooks.exists():
        for p in [notebooks, *notebooks.rglob("*")]:
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o700)
        shutil.rmtree(notebooks)
    shutil.copytree(course / "notebooks", notebooks, ignore=SKIP)
    for path in [notebooks, *notebooks.rglob("*")]:  # root's files, writable by none; the home keeps others out
        path.chmod(0o555 if path.is_dir() else 0o444)
    if cache is not None and cache.is_dir():
        _copy_tree(cache, home / CACHE, user)
    os.chown(home, user.pw_uid, user.pw_gid)
    make_private(home, user)


def make_private(home: Path, user: pwd.struct_passwd) -> None:
    """Home 0700; every file and folder the learner owns under it loses its group and other bits
    (an older room's 0644 lab copies, IPython's history, caches); links are left alone."""
    home.chmod(0o700)
    for root, dirs, files in os.walk(home):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if st.st_uid == user.pw_uid and not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                os.chmod(p, stat.S_IMODE(st.st_mode) & 0o700)


def _copy_tree(src: Path, dst: Path, user: pwd.struct_passwd) -> None:
    """Copy what ``dst`` lacks from ``src``, owned by ``user`` (Inductor writes beside what it reads:
    locks, and artifacts it rewrites, so a learner's cache must be theirs, not links to root's files)."""
    for root, dirs, files in os.walk(src):
        target = dst / Path(root).relative_to(src)
        target.mkdir(parents=True, exist_ok=True)
        for f in files:
            if not (target / f).exists():
                shutil.copy2(Path(root) / f, target / f)
    _chown_tree(dst, user)
    for parent in dst.parents:  # .cache, made by root above
        if str(parent).startswith(user.pw_dir + "/"):
            os.chown(parent, user.pw_uid, user.pw_gid)


def _chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid, follow_symlinks=False)


def remove_user(name: str) -> None:
    """Delete the OS user and their home (the room's own tests clean up with it)."""
    subprocess.run(["userdel", "--remove", name], capture_output=True)


def readable_by_others(path: Path) -> bool:
    """Whether a user other than the owner (and not in its group) can enter or read ``path``: every
    folder on the way is searchable by others and ``path`` itself is readable or searchable by them."""
    path = Path(os.path.realpath(path))
    if not path.exists():
        return False
    return all(os.stat(p).st_mode & 0o001 for p in path.parents) and bool(os.stat(path).st_mode & 0o005)


def course_copy(course: Path, where: Path) -> Path:
    """``where`` refreshed with what learners get of ``course``: ``notebooks/``, ``labs/`` and the library
    (``utils/shapelab``), root's and readable by all; never solutions, tests or the repository's history."""
    fresh = where.with_name(where.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    for part in SHARED:
        shutil.copytree(course / part, fresh / part, ignore=SKIP)
    shutil.copytree(course / "utils" / "shapelab", fresh / "utils" / "shapelab", ignore=SKIP)
    _readable_by_all(fresh)
    shutil.rmtree(where, ignore_errors=True)
    fresh.rename(where)
    return where


def learner_env(python: str, course: Path, where: Path) -> str:
    """A Python for learners' servers: a venv in ``where`` from the system's Python of ``python``'s
    version, with links to ``python``'s packages and Jupyter files (so JupyterLab and its extensions
    load), and the library from ``course`` (a ``course_copy``) instead of the repository's. Made again
    only when the course's packages changed; return the path of its ``python``."""
    probe = subprocess.run([python, "-c", "import sys, site; print(f'{sys.version_info[0]}.{sys.version_info[1]}');"
                            "print(sys.prefix); print(*site.getsitepackages(), sep='\\n')"],
                           capture_output=True, text=True, check=True)
    version, prefix, *site_packages = probe.stdout.split("\n")
    site_packages = [s for s in site_packages if s and Path(s).is_dir()]
    system = next((Path(d, f"python{version}") for d in ("/usr/bin", "/usr/local/bin")
                   if Path(d, f"python{version}").exists() and readable_by_others(Path(d, f"python{version}"))), None)
    if system is None:
        raise RuntimeError(f"learners need a Python {version} of the system (/usr/bin/python{version}) to run the "
                           f"course's packages without reading {python}'s folders: install python{version}")
    shared = [Path(prefix, "share", "jupyter"), Path(prefix, "etc", "jupyter")]
    stamp = "\n".join([str(system), str(course), *(f"{e.name} {e.stat().st_mtime_ns}" for d in site_packages
                                                     for e in sorted(Path(d).iterdir()))])
    target, stamp_file = where / "bin" / "python", where / "shapelab-env.stamp"
    if target.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return str(target)
    shutil.rmtree(where, ignore_errors=True)
    subprocess.run([str(system), "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    own = Path(subprocess.run([str(target), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip())
    for d in site_packages:
        _link_tree(Path(d), own)
    for entry in own.iterdir():  # the repository's own library: learners import the copy's
        if re.fullmatch(r"__editable__.*|shapelab-.*\.dist-info|.*shapelab.*\.pth", entry.name):
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for d in shared:
        if d.is_dir():
            _link_tree(d, where / d.relative_to(prefix))
    (own / "shapelab-course.pth").write_text(f"{course / 'utils'}\n")
    _readable_by_all(where)
    stamp_file.write_text(stamp)
    return str(target)


def _link_tree(src: Path, dst: Path) -> None:
    """Hard-link every file of ``src`` into ``dst`` (copies across file systems); what is there already stays."""
    dst.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["cp", "-aln", f"{src}/.", str(dst)], capture_output=True).returncode != 0:
        subprocess.run(["cp", "-an", f"{src}/.", str(dst)], check=True, capture_output=True)


def _readable_by_all(root: Path) -> None:
    """What every learner may read: read bits for all, and search bits on folders and programs (only ever
    added: a hard link shares the course's own file)."""
    subprocess.run(["chmod", "-R", "a+rX", str(root)], check=True, capture_output=True)
