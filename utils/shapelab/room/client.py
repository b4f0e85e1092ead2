"""The kernel's side of the room: send each revealed prediction and each lab check to the room service.

Inside a room, JupyterHub starts the learner's server with ``JUPYTERHUB_API_TOKEN`` (the server's own
token, which names the learner) and the room adds ``SHAPELAB_ROOM_URL`` (where the service listens);
kernels inherit both. Outside a room either is missing and every call returns at once: nothing is
sent, nothing printed, nothing changes. A send waits at most ``TIMEOUT`` seconds and never raises into
the lesson: when it fails, one line says the record was not sent and the lesson goes on. Over the room's
per-learner rate the service answers 429: the kernel says so once, sends nothing until the service's
Retry-After has passed, and the lesson goes on. A reveal the room counts in a second vote (the instructor
opened one on its prompt: the service decides, from when the record arrives) is said in one line.
"""
from __future__ import annotations

import json
import linecache
import os
import re
import sys
import time
import uuid

URL_ENV = "SHAPELAB_ROOM_URL"
TOKEN_ENV = "JUPYTERHUB_API_TOKEN"
TIMEOUT = 1.0  # seconds: a slow room costs a learner at most this per record
TEXT_LIMIT = 200  # characters kept of a value or a prompt (the service refuses longer)
_limited = {"until": 0.0, "said": False}  # this kernel's rate-limit state: quiet until, and whether it said so


def _room() -> tuple[str, str] | None:
    url, token = os.environ.get(URL_ENV), os.environ.get(TOKEN_ENV)
    return (url.rstrip("/"), token) if url and token else None


def record_reveal(predicted, measured, what: str, agreed: bool | None) -> bool | None:
    """Send one revealed prediction (called by ``reveal``; the prompt is the line that called it). ``agreed``
    None: the learner left the prediction unanswered, which is sent as such (predicted and agreed null)."""
    if _room() is None:
        return None
    answered = agreed is not None
    return _send("reveal", {"lesson": _lesson(), "prompt": _calling_line(depth=2) or what or "(unnamed)",
                            "predicted": _text(predicted) if answered else None, "measured": _text(measured),
                            "agreed": bool(agreed) if answered else None})


def record_check(lab: str, exercise: str, passed: bool, attempt: int) -> bool | None:
    """Send one lab check's result (called by ``Checker.check``)."""
    if _room() is None:
        return None
    return _send("check", {"lab": _text(lab), "exercise": _text(exercise), "passed": bool(passed),
                           "attempt": int(attempt)})


def record_inventory(form: str, item: str, phase: str, choice: str | None) -> bool | None:
    """Send one concept-inventory answer (called by ``labkit.inventory.answer``; the service keeps the first);
    ``choice`` None says the learner was shown how the item was scored, so a later answer is "after seeing"."""
    if _room() is None:
        return None
    return _send("inventory", {"form": _text(form), "item": _text(item), "phase": _text(phase),
                               "choice": None if choice is None else _text(choice)})


def assigned_form() -> str | None:
    """The inventory form the room assigns this learner before the lessons ("A" or "B"; the service
    counterbalances), or None outside a room or when the room does not answer (one line says so)."""
    room = _room()
    if room is None:
        return None
    url, token = room
    import urllib.request

    request = urllib.request.Request(f"{url}/api/form", headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            form = _answer(response).get("form")
    except Exception as e:
        print(f"(room: the service did not say which inventory form is yours: {_reason(e)}; one is chosen here)")
        return None
    return form if form in ("A", "B") else None


def _send(kind: str, record: dict) -> bool | None:
    """POST one record; True when the service acknowledged it, False (after one line) when not."""
    room = _room()
    if room is None:
        return None
    url, token = room
    if time.monotonic() < _limited["until"]:  # the room said to wait: nothing is sent, nothing said again
        return False
    import urllib.request  # imported only inside a room

    record = dict(record, id=uuid.uuid4().hex)  # the service stores each id once, so a retry cannot duplicate
    request = urllib.request.Request(f"{url}/api/{kind}", data=json.dumps(record).encode(), method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            if kind == "reveal" and _answer(response).get("round") == 2:
                print("(room: this answer counts in the second vote the instructor opened)")
            return 200 <= response.status < 300
    except Exception as e:  # a slow or absent room must never stop the lesson
        what = {"reveal": "prediction", "inventory": "inventory answer"}.get(kind, "check result")
        if getattr(e, "code", None) == 429:
            _limited["until"] = time.monotonic() + _retry_after(e)
            if not _limited["said"]:
                _limited["said"] = True
                print("(room: this kernel sent more records than the room takes from one learner; the instructor's "
                      "page misses them for a while; this is said once; the lesson goes on)")
            return False
        print(f"(room: this {what} was not recorded for the instructor: {_reason(e)}; the lesson goes on)")
        return False


def _answer(response) -> dict:
    """The service's JSON answer, or {} when it is not one."""
    try:
        answer = json.loads(response.read(4096))
        return answer if isinstance(answer, dict) else {}
    except Exception:
        return {}


def _retry_after(e) -> float:
    try:
        return max(1.0, min(600.0, float(e.headers.get("Retry-After", 60))))
    except (TypeError, ValueError, AttributeError):
        return 60.0


def _reason(e: Exception) -> str:
    code = getattr(e, "code", None)
    if code is not None:
        try:  # the service's one-line reason, such as "no prompt ... in lesson 01_symbolic_guards"
            why = json.loads(e.read())["error"]
            return f"the room service answered {code}: {str(why)[:300]}"
        except Exception:
            return f"the room service answered {code}"
    reason = getattr(e, "reason", e)
    return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


def _lesson() -> str:
    """The notebook this kernel runs (Jupyter server sets JPY_SESSION_NAME to its path); a copy JupyterLab
    made ("-Copy1") counts as the lesson it copies."""
    path = os.environ.get("JPY_SESSION_NAME", "")
    stem = os.path.splitext(os.path.basename(path))[0]
    return re.sub(r"-Copy\d+$", "", stem) or "(unknown notebook)"


def _calling_line(depth: int) -> str:
    """The source line that called our caller: in a notebook, the cell's ``S.reveal(...)`` line."""
    try:
        frame = sys._getframe(depth + 1)
        return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()[:TEXT_LIMIT]
    except Exception:
        return ""


def _text(value) -> str:
    return (value if isinstance(value, str) else repr(value))[:TEXT_LIMIT]
