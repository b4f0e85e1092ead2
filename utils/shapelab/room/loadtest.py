"""A bounded load test of the room service on the loopback: N simulated learners, each sending one
prediction per second, as a learner's kernel does (same endpoint, same token header, same timeout).

``run(url, tokens, seconds)`` returns what was sent, what the service acknowledged and the latencies;
the caller then reads the store to prove none was lost and none duplicated. A tenth of the records
are sent a second time with the same id, as a kernel retrying would, and must still be stored once.
The records are reveals of ``LESSON``'s prompts (the service takes only the course's), one a second,
within the service's per-learner rate.
"""
from __future__ import annotations

import json
import threading
import time
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
