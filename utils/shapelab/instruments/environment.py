"""The setup cell of every lesson: versions, device, and whether Inductor can compile here."""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from typing import NamedTuple

import torch

from . import compat
from .device import device_note, pick_device


@dataclass
class InductorCheck:
    """The outcome of one tiny Inductor compile, timed from an empty cache."""

    ok: bool
    seconds: float
    message: str


def inductor_check(device: torch.device | str = "cpu") -> InductorCheck:
    """Compile ``x.sin() + 1`` with Inductor from a fresh cache, time it, check the result.

    Never raises: a missing C++ compiler (CPU) or Triton (GPU) comes back as ``ok=False``
    with the error's first line and the fix.
    """
    from .isolation import isolated

    device = torch.device(device)
    x = torch.arange(8.0, device=device)
    try:
        with isolated(fresh_inductor_cache=True):
            start = time.perf_counter()
            out = torch.compile(lambda t: t.sin() + 1, backend="inductor")(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        if not torch.allclose(out, x.sin() + 1):
            return InductorCheck(False, seconds, "Inductor compiled, but the result is wrong")
        return InductorCheck(True, seconds, f"Inductor compiled a kernel in {seconds:.1f} s")
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        fix = ("install Triton (it ships with PyTorch's CUDA wheels)" if device.type == "cuda"
               else "install a C++ compiler (Debian/Ubuntu: apt-get install g++; macOS: xcode-select --install)")
        return InductorCheck(False, 0.0, f"Inductor could not compile here ({first}); {fix}")


SCALES = ("auto", "ci", "full")


class Setup(NamedTuple):
    """What a lesson runs with: ``device, scale, backend = S.setup(DEVICE, SCALE)``."""

    device: torch.device
    scale: str  # "ci" (small, cheap backend) or "full" (bigger, Inductor)
    backend: str  # the backend that counts compiles at this scale


def setup(device: str = "auto", scale: str = "auto", backend: str = "auto",
          check_inductor: bool = False) -> Setup:
    """Print the environment a lesson runs in; return its device, scale and backend.

    ``scale="auto"`` is "full" on a GPU and "ci" on a CPU; ``backend="auto"`` is Inductor at
    full scale and ``aot_eager`` (cheap, same counts) at ci scale.
    """
    if scale not in SCALES:
        raise ValueError(f"SCALE must be one of {', '.join(map(repr, SCALES))}, got {scale!r}")
    from .observe import BACKENDS

    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(f"BACKEND must be 'auto' or one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    dev = pick_device(device)
    if scale == "auto":
        scale = "full" if dev.type == "cuda" else "ci"
    if backend == "auto":
        backend = "inductor" if scale == "full" else "aot_eager"
    print(f"PyTorch {torch.__version__} | Python {platform.python_version()} | device: {dev} | "
          f"scale: {scale} | backend: {backend}")
    print(device_note(dev))
    for line in (compat.differs_from_pin(), compat.check_supported()):
        if line:
            print("Note:", line)
    if check_inductor:
        print(inductor_check(dev).message)
    return Setup(dev, scale, backend)
