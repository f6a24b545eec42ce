"""Variant specs: one config class per quantization method, a union discriminated on `method`.

The method implementations register under the same names in
`quantgate.tasks.quantize.registry`; a test keeps the two sets equal.
Sample::

    - name: int4_gptq
      method: int4_gptq
      group_size: 64          # must divide every Linear's in_features (576, 1536 on SmolLM2)
      num_samples: 64
      resources: {num_cpus: 1, memory_gb: 3}
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Resources(BaseModel):
    """What one variant's Ray task asks for (Ray schedules on these, it does not enforce them)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    num_cpus: Annotated[float, Field(gt=0)] = 1
    num_gpus: Annotated[float, Field(ge=0)] = 0
    memory_gb: Annotated[float, Field(gt=0)] = 3


class _Variant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    resources: Resources = Resources()
    control: bool = Field(
        default=False, description="a control is measured and reported but never wins the gate"
    )
    num_samples: Annotated[int, Field(ge=1)] = 64
    ignore: tuple[str, ...] = ("lm_head",)


class Fp8W8A8(_Variant):
    """FP8 E4M3 weights (per output channel, static) and activations (per token, dynamic)."""

    method: Literal["fp8_w8a8"]


class KvFp8(_Variant):
    """FP8 weights and activations as `fp8_w8a8`, plus an FP8 KV cache whose per-layer k/v
    scales are calibrated on the traffic sample."""

    method: Literal["kv_fp8"]


class _Int4(_Variant):
    group_size: Annotated[int, Field(ge=8)] = 64
    symmetric: bool = True


class Int4Rtn(_Int4):
    """Control: round-to-nearest INT4 weights, group-wise scales, no calibration."""

    method: Literal["int4_rtn"]


class Int4Gptq(_Int4):
    """GPTQ INT4 weights (W4A16): Hessian-aware rounding on calibration activations."""

    method: Literal["int4_gptq"]
    dampening_frac: Annotated[float, Field(gt=0, lt=1)] = 0.01
    actorder: Literal["static", "group", "weight"] | None = "static"


class Int4Awq(_Int4):
    """AWQ INT4 weights (W4A16): per-channel scales searched on calibration activations."""

    method: Literal["int4_awq"]
    symmetric: bool = False
    n_grid: Annotated[int, Field(ge=2)] = 20


VariantSpec = Annotated[
    Fp8W8A8 | KvFp8 | Int4Rtn | Int4Gptq | Int4Awq,
    Field(discriminator="method"),
]

METHOD_NAMES: tuple[str, ...] = ("fp8_w8a8", "kv_fp8", "int4_rtn", "int4_gptq", "int4_awq")
