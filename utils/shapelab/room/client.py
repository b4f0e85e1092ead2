"""The kernel's side of the room: send each revealed prediction and each lab check to the room service.

Inside a room, JupyterHub starts the learner's server with ``JUPYTERHUB_API_TOKEN`` (the server's own
token, which names the learner) and the room adds ``SHAPELAB_ROOM_URL`` (where the service listens);
kernels inherit both. Outside a room either is missing and every call returns at once: nothing is
sent, nothing printed, nothing changes. A send waits at most ``TIMEOUT`` seconds and never raises into
the lesson: when it fails, one line says the record was not sent and the lesson goes on.
"""
from __future__ import annotations

import json
import linecache
import os
import sys
import uuid

URL_ENV = "SHAPELAB_ROOM_URL"
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
TIMEOUT = 1.0  # seconds: a slow room costs a learner at most this per record
TEXT_LIMIT = 200  # characters kept of a value or a prompt (the service refuses longer)


def _room() -> tuple[str, str] | None:
    url, token = os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV)
    return (url.rstrip("/"), token) if url and token else None


def record_reveal(predicted, measured, what: str, agreed: bool) -> bool | None:
    """Send one revealed prediction (called by ``reveal``; the prompt is the line that called it)."""
    if _room() is None:
        return None
    return _send("reveal", {"lesson": _lesson(), "prompt": _calling_line(depth=2) or what or "(unnamed)",
                            "predicted": _text(predicted), "measured": _text(measured), "agreed": bool(agreed)})


def record_check(lab: str, exercise: str, passed: bool, attempt: int) -> bool | None:
    """Send one lab check's result (called by ``Checker.check``)."""
    if _room() is None:
        return None
    return _send("check", {"lab": _text(lab), "exercise": _text(exercise), "passed": bool(passed),
                           "attempt": int(attempt)})


def _send(kind: str, record: dict) -> bool | None:
    """POST one record; True when the service acknowledged it, False (after one line) when not."""
    room = _room()
    if room is None:
        return None
    url, token = room
    import urllib.request  # imported only inside a room

    record = dict(record, id=uuid.uuid4().hex)  # the service stores each id once, so a retry cannot duplicate
    request = urllib.request.Request(f"{url}/api/{kind}", data=json.dumps(record).encode(), method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return 200 <= response.status < 300
    except Exception as e:  # a slow or absent room must never stop the lesson
        what = "prediction" if kind == "reveal" else "check result"
        print(f"(room: this {what} was not recorded for the instructor: {_reason(e)}; the lesson goes on)")
        return False


def _reason(e: Exception) -> str:
    code = getattr(e, "code", None)
    if code is not None:
        return f"the room service answered {code}"
    reason = getattr(e, "reason", e)
    return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


def _lesson() -> str:
    """The notebook this kernel runs (Jupyter server sets JPY_SESSION_NAME to its path)."""
    path = os.environ.get("JPY_SESSION_NAME", "")
    return os.path.splitext(os.path.basename(path))[0] or "(unknown notebook)"


def _calling_line(depth: int) -> str:
    """The source line that called our caller: in a notebook, the cell's ``S.reveal(...)`` line."""
    try:
        frame = sys._getframe(depth + 1)
        return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()[:TEXT_LIMIT]
    except Exception:
        return ""


def _text(value) -> str:
    return (value if isinstance(value, str) else repr(value))[:TEXT_LIMIT]
