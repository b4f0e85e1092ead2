"""Which device the course runs on, and what that changes for the learner."""
from __future__ import annotations

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def pick_device(requested: str = "auto") -> torch.device:
    """CUDA when present and asked for (or "auto"), otherwise the CPU.

    Asking for "cuda" on a machine without a GPU prints why and returns the CPU,
    so a lesson still runs.
    """
    if requested not in DEVICE_CHOICES:
        raise ValueError(f"unknown device {requested!r}; choose from {', '.join(DEVICE_CHOICES)}")
    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda")
    if requested == "cuda":
        print("No CUDA GPU is visible to PyTorch here; running on the CPU instead.")
    return torch.device("cpu")


def device_note(device: torch.device) -> str:
    """One sentence on what the learner should expect on this device."""
    if device.type == "cuda":
        return (f"GPU: {torch.cuda.get_device_name(device)}. Inductor writes Triton kernels; "
                "full sizes; the speed gaps in the lessons are large here.")
    return ("CPU: Inductor writes C++ kernels, sizes are small, and speed gaps are smaller than on "
            "a GPU; compile counts, guards and recompile reasons are the same.")
