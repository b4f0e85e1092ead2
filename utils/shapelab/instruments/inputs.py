"""Input tensors for experiments, with clear errors for shapes that cannot be made."""
from __future__ import annotations

import math
import os
import re
from typing import Iterable, Sequence

import torch

# Refuse a single tensor larger than this share of free memory: the kernel must survive a typo.
_MEMORY_SHARE = 0.25


def validate_count(name: str, value, low: int = 1) -> int:
    """Return ``value`` if it is a whole number >= ``low``; otherwise raise, naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number, got {value!r} ({type(value).__name__})")
    if value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return value


def validate_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Return ``shape`` as a tuple of ints, or raise ValueError/TypeError saying what is wrong.

    Sizes of 0 are allowed (they are part of the lesson); negative or non-integer sizes are not.
    """
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"a shape is a tuple of ints, got {shape!r}") from None
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"shape {dims!r}: every size must be an int, got {d!r} ({type(d).__name__})")
        if d < 0:
            raise ValueError(f"shape {dims!r}: sizes cannot be negative (got {d})")
    return dims


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def make_tensor(shape: Sequence[int], *, device="cpu", dtype=torch.float32, seed: int | None = 0) -> torch.Tensor:
    """A random tensor of ``shape``; a shape too big for memory raises MemoryError before allocating."""
    dims = validate_shape(shape)
    device = torch.device(device)
    nbytes = math.prod(dims) * torch.empty((), dtype=dtype).element_size()
    budget = _free_bytes(device) * _MEMORY_SHARE
    if nbytes > budget:
        raise MemoryError(
            f"shape {dims} in {dtype} needs {nbytes / 2**30:.1f} GiB; this course refuses tensors over "
            f"{budget / 2**30:.1f} GiB (a quarter of free {device.type} memory). Use a smaller size."
        )
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    if dtype.is_floating_point:
        t = torch.randn(dims, generator=gen, dtype=dtype)
    else:
        t = torch.randint(0, 100, dims, generator=gen, dtype=dtype)
    return t.to(device)


def batches(sizes: Iterable[int], *rest: int, device="cpu", dtype=torch.float32) -> list[torch.Tensor]:
    """One tensor per batch size: ``batches([4, 8], 3)`` gives shapes (4, 3) and (8, 3)."""
    return [make_tensor((b, *rest), device=device, dtype=dtype, seed=i) for i, b in enumerate(sizes)]


def parse_sizes(text: str) -> list[int]:
    """``"4, 8, 16, 1"`` -> ``[4, 8, 16, 1]``, with a clear message for anything else."""
    if not isinstance(text, str):
        raise TypeError(f"expected text like '4, 8, 16', got {type(text).__name__}")
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    if not parts:
        raise ValueError("no sizes given: type a list like 4, 8, 16, 1")
    sizes = []
    for p in parts:
        try:
            sizes.append(int(p))
        except ValueError:
            raise ValueError(f"{p!r} is not a whole number; type sizes like 4, 8, 16, 1") from None
    for s in sizes:
        validate_shape((s,))
    return sizes


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``"4x16, 8x16"`` -> ``[(4, 16), (8, 16)]``, with a message a learner can act on otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"expected text like '4x16, 8x16', got {type(text).__name__}")
    shapes = []
    for part in [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]:
        dims = [d.strip() for d in re.split(r"[x×*]", part.lower())]
        if len(dims) != 2:
            raise ValueError(f"{part!r}: write each shape as batch x features, like 4x16")
        try:
            b, f = (int(d) for d in dims)
        except ValueError:
            raise ValueError(f"{part!r}: sizes must be whole numbers, like 4x16") from None
        validate_shape((b, f))
        shapes.append((b, f))
    return shapes
