"""How a decode op picks its path, shared by `quip_ops` and `aqlm_ops`: the `impl` keyword, then
$QUANTGATE_KERNELS, then the device; and torch.compile with a permanent eager fallback."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Literal

import torch

Impl = Literal["reference", "fast", "triton"]
IMPLS: tuple[str, ...] = ("reference", "fast", "triton")
KERNELS_ENV = "QUANTGATE_KERNELS"  # reference | fast | triton: force a path for every call
COMPILE_ENV = "QUANTGATE_COMPILE"  # "0": never torch.compile (the fast path runs eager)


def resolve_impl(impl: str | None, x: torch.Tensor) -> str:
    """The keyword wins, then $QUANTGATE_KERNELS, then the device: CUDA -> triton, else fast."""
    choice = impl or os.environ.get(KERNELS_ENV) or ("triton" if x.is_cuda else "fast")
    if choice not in IMPLS:
        source = "keyword `impl`" if impl else f"${KERNELS_ENV}"
        raise ValueError(f"{source}={choice!r}: expected one of {', '.join(IMPLS)}")
    return choice


class _Compiled:
    """`fn` under torch.compile; after one failure (no C++ toolchain, an inductor bug) eager for good."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        self.fn = fn
        self.compiled: Callable[..., torch.Tensor] | None = None
        self.failed = False

    def __call__(self, *args: torch.Tensor | int) -> torch.Tensor | None:
        if self.failed or os.environ.get(COMPILE_ENV, "1") == "0":
            return None
        if torch.compiler.is_compiling():  # inside a caller's torch.compile: let it trace fn
            return self.fn(*args)
        try:
            if self.compiled is None:
                # Default dynamic=None: the first shape is specialized, the second marks the dims
                # that changed (m, groups) dynamic, so a model's few layer shapes cost ~2 compiles.
                self.compiled = torch.compile(self.fn)
            return self.compiled(*args)
        except Exception as err:  # any compile failure means: use the eager path
            self.failed = True
            warnings.warn(f"torch.compile of {self.fn.__name__} failed, using eager: {err}", stacklevel=3)
            return None


def compiled_or_none(fn: Callable[..., torch.Tensor]) -> _Compiled:
    """Wrap fn; calling the wrapper returns None when the caller should take its eager path."""
    return _Compiled(fn)
