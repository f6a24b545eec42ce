"""Hardware profiles for the roofline planner (`quantgate.tasks.perf.roofline`).

One profile per target: memory bandwidth, dense peak compute per format, and for every kernel
family a method can need (`conf.methods.KERNELS`: fp8, int4, int2, e8p, aqlm) whether the target
runs it natively, weight-only, or not at all. Which family a method needs comes from the method
(`kernel` on its spec), so a new method on an existing kernel changes nothing here. The numbers
live in `conf/hardware.yaml`; each profile says where its numbers come from. Sample::

    - name: a100-80gb
      kind: gpu
      description: NVIDIA A100 80GB SXM (Ampere)
      mem_bandwidth_gbs: 2039
      tflops: {bf16: 312, fp16: 312, int8: 624}
      formats: {fp8: none, int4: weight_only, int2: weight_only, e8p: weight_only, aqlm: weight_only}
      notes: {fp8: "no FP8 tensor cores on Ampere"}
      source: "NVIDIA A100 datasheet, dense peaks (no sparsity)"
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, model_validator

from quantgate.conf.base import Strict
from quantgate.conf.methods import KERNELS, NATIVE_KERNELS

ComputeFormat = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
Support = Literal["native", "weight_only", "none"]

WEIGHT_ONLY_COMPUTE: tuple[str, ...] = ("bf16", "fp32")
"""Compute formats a weight-only kernel falls back on, in order of preference."""


class HardwareProfile(Strict):
    """One target: what a decode step can read per second and compute per second."""

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    kind: Literal["gpu", "cpu"]
    description: str
    mem_bandwidth_gbs: Annotated[float, Field(gt=0, description="GB/s (1e9 bytes)")]
    tflops: dict[ComputeFormat, Annotated[float, Field(gt=0)]] = Field(
        description="dense peak (no sparsity), TFLOP/s or TOP/s per compute format")
    formats: dict[str, Support] = Field(
        description="per kernel family: native (matmul in the format's units), weight_only "
        "(weights read compressed, dequantized in-kernel, bf16/fp16 compute), none (no kernel path)")
    notes: dict[str, str] = {}
    # Bits per weight a kernel family's weights take in memory on this target when its kernel works
    # on a wider format (this CPU: FP8 runs as bf16, 2-bit codes as 4-bit); the planner reads these.
    runtime_bits: dict[str, Annotated[float, Field(gt=0)]] = {}
    source: str
    watts_per_busy_core: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="CPU only: stated power per busy core for the energy estimate")
    base_watts: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _check(self) -> HardwareProfile:
        errors = []
        missing = [k for k in KERNELS if k not in self.formats]
        if missing:
            errors.append(f"profile {self.name!r}: formats is missing {', '.join(missing)}")
        unknown = sorted((set(self.formats) | set(self.notes) | set(self.runtime_bits)) - set(KERNELS))
        if unknown:
            errors.append(f"profile {self.name!r}: unknown kernel families {', '.join(unknown)} "
                          f"(known: {', '.join(KERNELS)})")
        for kernel, support in self.formats.items():
            if support == "native":
                fmt = NATIVE_KERNELS.get(kernel)
                if fmt is None:
                    errors.append(f"profile {self.name!r}: {kernel} has no native compute format "
                                  f"(only {', '.join(NATIVE_KERNELS)} run natively); use weight_only")
                elif fmt not in self.tflops:
                    errors.append(f"profile {self.name!r}: {kernel} is native but tflops has no {fmt!r}")
            elif support == "weight_only" and not any(f in self.tflops for f in WEIGHT_ONLY_COMPUTE):
                errors.append(f"profile {self.name!r}: {kernel} is weight_only but tflops has none of "
                              f"{', '.join(WEIGHT_ONLY_COMPUTE)}")
        if self.kind == "gpu" and (self.watts_per_busy_core is not None or self.base_watts is not None):
            errors.append(f"profile {self.name!r}: watts_per_busy_core/base_watts are for CPU profiles")
        if errors:
            raise ValueError("; ".join(errors))
        return self

    def weight_only_format(self) -> str:
        """The compute format a weight-only kernel uses on this target."""
        return next(f for f in WEIGHT_ONLY_COMPUTE if f in self.tflops)


def default_profiles_path() -> Path:
    return Path(__file__).with_name("hardware.yaml")


def load_profiles(path: Path | None = None) -> dict[str, HardwareProfile]:
    """Read a YAML list of profiles (default: `conf/hardware.yaml` next to this file), keyed by name."""
    path = Path(path) if path is not None else default_profiles_path()
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, list):
        raise ValueError(f"{path}: top level must be a list of hardware profiles")
    profiles: dict[str, HardwareProfile] = {}
    for item in raw:
        p = HardwareProfile.model_validate(item)
        if p.name in profiles:
            raise ValueError(f"{path}: profile {p.name!r} appears twice")
        profiles[p.name] = p
    return profiles


@cache
def _default_profiles() -> dict[str, HardwareProfile]:
    return load_profiles()


def hardware_profile(name: str) -> HardwareProfile:
    """The packaged profile called `name`; an unknown name is a ValueError listing the known ones."""
    profiles = _default_profiles()
    if name not in profiles:
        raise ValueError(f"unknown hardware profile {name!r}; known: {', '.join(sorted(profiles))}")
    return profiles[name]
