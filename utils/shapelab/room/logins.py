"""Login codes: a roster name is used only by the learner it was handed to.

First-use passwords (The Littlest JupyterHub's) let whoever logs in first with a name choose its
password, so a learner could claim a classmate's name, or the instructor's. Instead, the room gives
every name it knows (the roster's and the instructor's) a random code before the hub opens and stores
it as that name's password (bcrypt, in the authenticator's own database): only the person holding the
code can log in with the name, and may then choose another password at ``/hub/auth/change-password``.
The codes are written for the instructor to print and hand out, one slip per learner
(``<state>/login-codes.txt``, root's alone); a name whose code was issued keeps it across restarts.
Without a roster anyone may still sign up with a new name (first use), but not as the instructor.
"""
from __future__ import annotations

import dbm
import json
import os
import secrets
from pathlib import Path

ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: read off a printed slip
LENGTH = 10  # about 49 bits: not guessable through a login page in a session
ROUNDS = 6   # bcrypt's cost: a random code needs no slow hash, and 40 names start in well under a second


def new_code() -> str:
    """A fresh login code: ``LENGTH`` characters of ``ALPHABET`` from the system's secure random source."""
    return "".join(secrets.choice(ALPHABET) for _ in range(LENGTH))


def issue(names, passwords_dbm: str, codes_file: Path) -> dict[str, str]:
    """Give each of ``names`` without a password yet a code, stored as its password in ``passwords_dbm``
    (FirstUseAuthenticator's database) and in ``codes_file`` (0600); return every issued code by name."""
    import bcrypt

    codes_file = Path(codes_file)
    codes = json.loads(codes_file.read_text()) if codes_file.exists() else {}
    with dbm.open(passwords_dbm, "c", 0o600) as db:
        for name in names:
            if db.get(name.encode()) is None:  # never used, or a name new to the roster
                codes[name] = new_code()
                db[name.encode()] = bcrypt.hashpw(codes[name].encode(), bcrypt.gensalt(rounds=ROUNDS))
    fd = os.open(codes_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(codes, f, indent=1)
    return codes


def sheet(codes: dict[str, str], hub_url: str, instructor: str) -> str:
    """The codes as slips to print and cut, the instructor's first, each with where and how to log in."""
    rule = "-" * 72
    lines = [f"The room's login codes ({hub_url}/hub/login). Hand each learner their own slip only."]
    for name in sorted(codes, key=lambda n: (n != instructor, n)):
        lines += [rule, f"name: {name:<32} code: {codes[name]}" + ("   (the instructor)" if name == instructor else ""),
                  f"Log in at {hub_url}/hub/login with this name and this code as the password;",
                  f"choose your own password after, if you like, at {hub_url}/hub/auth/change-password"]
    return "\n".join(lines + [rule]) + "\n"
