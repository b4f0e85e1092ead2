"""The setup cell of every lesson: versions, device, and whether Inductor can compile here."""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass

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


def setup(device: str = "auto", check_inductor: bool = False) -> torch.device:
    """Print the environment a lesson runs in and return the device to use."""
    dev = pick_device(device)
    print(f"PyTorch {torch.__version__} | Python {platform.python_version()} | device: {dev}")
    print(device_note(dev))
    for line in (compat.differs_from_pin(), compat.check_supported()):
        if line:
            print("Note:", line)
    if check_inductor:
        print(inductor_check(dev).message)
    return dev
