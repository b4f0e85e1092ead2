"""A bounded load test of the room service on the loopback: N simulated learners, each sending one
prediction per second, as a learner's kernel does (same endpoint, same token header, same timeout).

``run(url, tokens, seconds)`` returns what was sent, what the service acknowledged and the latencies;
the caller then reads the store to prove none was lost and none duplicated. A tenth of the records
are sent a second time with the same id, as a kernel retrying would, and must still be stored once.
The records are reveals of ``LESSON``'s prompts (the service takes only the course's), one a second,
within the service's per-learner rate.

    python -m shapelab.room.loadtest --service http://127.0.0.1:10101/services/room --learners 40 --seconds 60

runs it against a room that is up, as the room's own test does (``SHAPELAB_ROOM_LOAD_SECONDS=60 pytest
tests/test_room.py -k load -s`` also proves none was lost or duplicated, from the store): it makes the
users ``roomload-00``... on the hub (never OS users: they start no server) and a token each, which needs a
token allowed to (scopes ``admin:users``, ``tokens``, ``list:users``) in ``JUPYTERHUB_API_TOKEN``; the
instructor's account is not (INSTRUCTOR.md, part 4).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field

from . import manifest
from .client import TIMEOUT

LESSON = "05_data_dependent_shapes"  # the lesson with the most prompts


@dataclass
class Load:
    sent: int = 0
    acknowledged: dict = field(default_factory=dict)  # id -> user
    resent: int = 0
    failed: list = field(default_factory=list)
    latencies: list = field(default_factory=list)  # seconds, one per request
    first: list = field(default_factory=list)  # each learner's first request: the service asks the hub who it is

    def p95(self, steady: bool = False) -> float:
        """The 95th percentile latency; ``steady``: without each learner's first request."""
        ordered = sorted(self.latencies)
        if steady:
            for t in self.first:
                ordered.remove(t)
        return ordered[int(0.95 * (len(ordered) - 1))] if ordered else float("nan")


def _post(url: str, token: str, record: dict) -> tuple[int, float]:
    request = urllib.request.Request(f"{url}/api/reveal", data=json.dumps(record).encode(), method="POST",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return response.status, time.perf_counter() - start


def run(url: str, tokens: dict[str, str], seconds: float, rate: float = 1.0) -> Load:
    """Each user in ``tokens`` (name -> token) sends ``rate`` predictions per second for ``seconds``."""
    load, lock = Load(), threading.Lock()
    start = time.monotonic()
    prompts = [p.line for p in manifest.load().lesson(LESSON).prompts]

    def learner(index: int, name: str, token: str):
        tick = index / len(tokens) / rate  # spread the learners over the second
        n = 0
        while tick < seconds:
            time.sleep(max(0.0, start + tick - time.monotonic()))
            record = {"id": uuid.uuid4().hex, "lesson": LESSON, "prompt": prompts[n % len(prompts)],
                      "predicted": str(n % 3), "measured": "1", "agreed": n % 3 == 1}
            for attempt in range(2 if (n + index) % 10 == 9 else 1):  # a tenth of the records are sent twice
                try:
                    status, latency = _post(url, token, record)
                    with lock:
                        load.sent += attempt == 0
                        load.resent += attempt == 1
                        load.latencies.append(latency)
                        if n == 0 and attempt == 0:
                            load.first.append(latency)
                        if status in (200, 201):
                            load.acknowledged[record["id"]] = name
                except Exception as e:
                    with lock:
                        load.sent += attempt == 0
                        load.failed.append(f"{name}: {type(e).__name__}: {e}")
            n += 1
            tick += 1 / rate

    threads = [threading.Thread(target=learner, args=(i, name, token), daemon=True)
               for i, (name, token) in enumerate(tokens.items())]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 10 * TIMEOUT)
    return load


def _hub(method: str, url: str, token: str, body=None) -> dict:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def main(argv=None) -> int:
    """Run the load test against a running room and print one line of what it measured."""
    parser = argparse.ArgumentParser(prog="python -m shapelab.room.loadtest", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--service", default="http://127.0.0.1:10101/services/room",
                        help="where kernels send (the room's --service-port; default %(default)s)")
    parser.add_argument("--hub-api", default="http://127.0.0.1:8081/hub/api",
                        help="the hub's API (the room's --hub-api-port; default %(default)s)")
    parser.add_argument("--learners", type=int, default=40, help="simulated learners (default 40)")
    parser.add_argument("--seconds", type=float, default=60, help="how long each sends (default 60)")
    args = parser.parse_args(argv)
    token = os.environ.get("JUPYTERHUB_API_TOKEN")
    if not token:
        parser.error("set JUPYTERHUB_API_TOKEN to a token with the scopes admin:users, tokens, list:users")
    if not 1 <= args.learners <= 1000 or args.seconds <= 0:
        parser.error("--learners 1 to 1000 and --seconds above 0")
    names = [f"roomload-{i:02d}" for i in range(args.learners)]
    try:
        for name in names:
            try:
                _hub("POST", f"{args.hub_api}/users/{name}", token)
            except urllib.error.HTTPError as e:
                if e.code != 409:  # 409: there from an earlier run
                    raise
        tokens = {n: _hub("POST", f"{args.hub_api}/users/{n}/tokens", token,
                          {"scopes": ["access:services!service=room"], "note": "load test"})["token"] for n in names}
    except (OSError, ValueError, KeyError) as e:
        print(f"the hub refused to make the test's users and tokens: {e}", file=sys.stderr)
        return 1
    load = run(args.service.rstrip("/"), tokens, args.seconds)
    ordered = sorted(load.latencies) or [float("nan")]
    print(f"{args.learners} learners x {args.seconds:g} s: {load.sent} sent (+{load.resent} resent), "
          f"{len(load.acknowledged)} acknowledged, {len(load.failed)} failed; p95 {1000 * load.p95():.1f} ms, "
          f"median {1000 * ordered[len(ordered) // 2]:.1f} ms, max {1000 * ordered[-1]:.1f} ms")
    for line in load.failed[:5]:
        print("failed:", line)
    return 0 if not load.failed else 1


if __name__ == "__main__":
    sys.exit(main())
