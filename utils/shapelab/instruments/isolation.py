"""Isolated experiments: each one starts from a clean compile state and leaves nothing behind.

``with isolated(): ...`` resets Dynamo, turns the cross-process profile off, and on the way
out restores every config value, log setting, environment variable, thread count, grad
mode and compiler stance it found, also when the experiment raises.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Iterator

import torch

from . import compat

# Config modules an experiment may touch. Each exposes get_config_copy() in 2.11+.
_CONFIG_MODULES = (
    "torch._dynamo.config",
    "torch._inductor.config",
    "torch.fx.experimental._config",
    "torch._functorch.config",
)


def _config_module(name: str):
    import importlib

    return importlib.import_module(name)


def _torch_logger_names() -> list[str]:
    from torch._logging._internal import log_registry

    names = set(log_registry.get_log_qnames())
    names |= set(log_registry.get_artifact_log_qnames())
    names |= set(log_registry.get_child_log_qnames())
    return sorted(names)


@dataclass
class Snapshot:
    """Everything ``isolated`` restores, captured at one moment; compare two with ``==``."""

    configs: dict
    env: dict
    loggers: dict
    log_state: object
    threads: int
    grad: bool
    stance: tuple
    default_dtype: torch.dtype

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Snapshot):
            return NotImplemented
        return self.differences(other) == []

    def differences(self, other: "Snapshot") -> list[str]:
        """Human-readable list of what differs between two snapshots."""
        out = []
        for mod, values in self.configs.items():
            for key, value in values.items():
                if other.configs[mod].get(key, value) != value:
                    out.append(f"{mod}.{key}: {value!r} -> {other.configs[mod][key]!r}")
        keys = set(self.env) | set(other.env)
        out += [f"env {k}: {self.env.get(k)!r} -> {other.env.get(k)!r}" for k in sorted(keys) if self.env.get(k) != other.env.get(k)]
        for name, state in self.loggers.items():
            if other.loggers.get(name, state) != state:
                out.append(f"logger {name}: {state} -> {other.loggers[name]}")
        if vars(self.log_state) != vars(other.log_state):
            out.append("torch._logging state changed")
        for field in ("threads", "grad", "stance", "default_dtype"):
            if getattr(self, field) != getattr(other, field):
                out.append(f"{field}: {getattr(self, field)!r} -> {getattr(other, field)!r}")
        return out


def snapshot() -> Snapshot:
    """Capture the state ``isolated`` promises to restore."""
    from torch._logging import _internal

    loggers = {}
    for name in _torch_logger_names():
        lg = logging.getLogger(name)
        loggers[name] = (lg.level, lg.propagate, tuple(lg.handlers))
    return Snapshot(
        configs={m: dict(_config_module(m).get_config_copy()) for m in _CONFIG_MODULES},
        env=dict(os.environ),
        loggers=loggers,
        log_state=copy.deepcopy(_internal.log_state),
        threads=torch.get_num_threads(),
        grad=torch.is_grad_enabled(),
        stance=compat.current_stance(),
        default_dtype=torch.get_default_dtype(),
    )


def restore(snap: Snapshot) -> None:
    """Put back everything captured in ``snap``."""
    from torch._logging import _internal

    for mod_name, values in snap.configs.items():
        mod = _config_module(mod_name)
        now = mod.get_config_copy()
        for key, value in values.items():
            if now.get(key, value) != value:
                setattr(mod, key, value)
    for key in set(os.environ) - set(snap.env):
        del os.environ[key]
    os.environ.update(snap.env)
    _internal.log_state.log_qname_to_level = dict(snap.log_state.log_qname_to_level)
    _internal.log_state.artifact_names = set(snap.log_state.artifact_names)
    for name in _torch_logger_names():
        lg = logging.getLogger(name)
        level, propagate, handlers = snap.loggers.get(name, (logging.NOTSET, True, ()))
        lg.setLevel(level)
        lg.propagate = propagate
        lg.handlers[:] = list(handlers)
    if torch.get_num_threads() != snap.threads:
        torch.set_num_threads(snap.threads)
    torch.set_grad_enabled(snap.grad)
    torch.set_default_dtype(snap.default_dtype)
    if compat.has_set_stance() and compat.current_stance() != snap.stance:
        stance, skip = snap.stance
        torch.compiler.set_stance(stance, skip_guard_eval_unsafe=skip)


def clean_compile_state() -> None:
    """Forget every compiled graph, automatic-dynamic memory, counter and compile metric."""
    torch.compiler.reset()
    torch._dynamo.utils.counters.clear()
    clear = getattr(torch._dynamo.utils, "clear_compilation_metrics", None)
    if clear is not None:
        clear()


@contextlib.contextmanager
def isolated(*, fresh_inductor_cache: bool = False, config: dict | None = None) -> Iterator[Snapshot]:
    """Run an experiment from a clean compile state and restore everything afterwards.

    - ``fresh_inductor_cache``: point Inductor at an empty cache directory for the duration,
      so compile times are honest (a warm on-disk cache makes compiles 10-20x faster).
    - ``config``: ``torch._dynamo.config`` values to set for the duration, e.g.
      ``{"recompile_limit": 64}``; unknown names raise ``KeyError`` before anything changes.

    Yields the snapshot taken on entry.
    """
    cfg = torch._dynamo.config
    unknown = [k for k in (config or {}) if k not in cfg.get_config_copy()]
    if unknown:
        raise KeyError(f"unknown torch._dynamo.config name(s): {', '.join(unknown)}")
    before = snapshot()
    cache_dir = None
    try:
        clean_compile_state()
        # The cross-process profile would carry shapes seen by an earlier process into this one.
        cfg.automatic_dynamic_local_pgo = False
        os.environ["TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO"] = "0"
        os.environ.pop("TORCH_COMPILE_JOB_ID", None)
        if fresh_inductor_cache:
            cache_dir = tempfile.mkdtemp(prefix="shapelab-inductor-")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
            _clear_inductor_memory_caches()
        for key, value in (config or {}).items():
            setattr(cfg, key, value)
        yield before
    finally:
        clean_compile_state()
        restore(before)
        if cache_dir is not None:
            _clear_inductor_memory_caches()
            shutil.rmtree(cache_dir, ignore_errors=True)


def _clear_inductor_memory_caches() -> None:
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:  # older releases: the on-disk directory change is enough
        return
    clear_caches()
