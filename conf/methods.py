"""Variant specs: one config class per quantization method, a union discriminated on `method`.

A method describes itself here: its parameters, the kernel family a serving target needs for it
(`kernel`, the key of a hardware profile's `formats`), whether its matmul runs in its own units
(`native_compute`), its KV-cache width (`kv_bits`) and its nominal bits per weight
(`weight_bits()`). Its implementation is `quantgate.tasks.quantize.methods.<method>`. Adding a
method: its class below, one line in `SPECS`, its implementation module. Sample::

    - name: int4_gptq
      method: int4_gptq
      group_size: 64          # must divide every Linear's in_features (576, 1536 on SmolLM2)
      num_samples: 64
      resources: {num_cpus: 1, memory_gb: 3}
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, TypeAdapter, model_validator

from quantgate.conf.base import Strict

SCALE_BITS = 16  # one bf16/fp16 scale per group, as compressed-tensors stores it


class Resources(Strict):
    """What one variant's Ray task asks for (Ray schedules on these, it does not enforce them)."""

    num_cpus: Annotated[float, Field(gt=0)] = 1
    num_gpus: Annotated[float, Field(ge=0)] = 0
    memory_gb: Annotated[float, Field(gt=0)] = 3


class _Variant(Strict):
    kernel: ClassVar[str]  # kernel family a target needs: a key of HardwareProfile.formats
    native_compute: ClassVar[str | None] = None  # compute format of a W8A8-style native matmul
    kv_bits: ClassVar[int | None] = None  # KV-cache bits when the method quantizes it
    # The production engine loads this format (vLLM: dense, compressed-tensors). QuIP# and AQLM: no
    # production engine serves them; they are scored on the reference path and never canaried.
    engine_serves: ClassVar[bool] = True

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
    resources: Resources = Resources()
    control: bool = Field(
        default=False, description="a control is measured and reported but never wins the gate"
    )
    num_samples: Annotated[int, Field(ge=1)] = 64
    ignore: tuple[str, ...] = Field(
        default=("lm_head",), description="Linears left unquantized: each entry matches the module names "
        "that contain it. In the 2-bit formats a kept Linear of a decoder block is stored in fp16 and "
        "counts in bits per weight (mixed precision, e.g. 'layers.0.mlp.down_proj')")

    def weight_bits(self) -> float:
        """Nominal bits stored per quantized weight, scales and codebooks aside unless stated."""
        raise NotImplementedError


class Fp8W8A8(_Variant):
    """FP8 E4M3 weights (per output channel, static) and activations (per token, dynamic)."""

    kernel: ClassVar[str] = "fp8"
    native_compute: ClassVar[str | None] = "fp8"
    method: Literal["fp8_w8a8"]

    def weight_bits(self) -> float:
        return 8.0  # the per-channel scale (16 / in_features bits) is negligible


class KvFp8(Fp8W8A8):
    """FP8 weights and activations as `fp8_w8a8`, plus an FP8 KV cache whose per-layer k/v
    scales are calibrated on the traffic sample."""

    kv_bits: ClassVar[int | None] = 8
    method: Literal["kv_fp8"]  # type: ignore[assignment]


class Int8W8A8(_Variant):
    """INT8 W8A8: INT8 weights (per output channel, GPTQ-rounded after SmoothQuant moves activation
    outliers into the weights) and INT8 activations (per token, dynamic). The format vLLM serves on
    every x86 CPU (oneDNN) and on GPUs from Turing on."""

    kernel: ClassVar[str] = "int8"
    native_compute: ClassVar[str | None] = "int8"
    method: Literal["int8_w8a8"]
    smoothing_strength: Annotated[float, Field(gt=0, lt=1)] = 0.8
    dampening_frac: Annotated[float, Field(gt=0, lt=1)] = 0.01

    def weight_bits(self) -> float:
        return 8.0  # the per-channel scale (16 / in_features bits) is negligible


class Fp8KvCache(_Variant):
    """An FP8 KV cache on the unquantized weights: keys and values stored as E4M3 with per-layer
    scales calibrated on the traffic sample. The engine serves it as `--kv-cache-dtype fp8`."""

    kernel: ClassVar[str] = "bf16"
    kv_bits: ClassVar[int | None] = 8
    method: Literal["fp8_kv_cache"]

    def weight_bits(self) -> float:
        return 16.0


class _Int4(_Variant):
    kernel: ClassVar[str] = "int4"
    num_bits: ClassVar[int] = 4
    group_size: Annotated[int, Field(ge=8)] = 64
    symmetric: bool = True

    def weight_bits(self) -> float:
        """Codes, a 16-bit scale per group, and a code-width zero point per group when asymmetric."""
        zero = 0 if self.symmetric else self.num_bits
        return self.num_bits + (SCALE_BITS + zero) / self.group_size


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


class Int2Rtn(Int4Rtn):
    """Control for the 2-bit methods: round-to-nearest on a 2-bit grid, group-wise scales."""

    kernel: ClassVar[str] = "int2"
    num_bits: ClassVar[int] = 2
    method: Literal["int2_rtn"]  # type: ignore[assignment]
    control: bool = True


class Int2Gptq(Int4Gptq):
    """Control for the 2-bit methods: GPTQ on a 2-bit grid (Hessian-aware, scalar, no rotation)."""

    kernel: ClassVar[str] = "int2"
    num_bits: ClassVar[int] = 2
    method: Literal["int2_gptq"]  # type: ignore[assignment]
    control: bool = True


class _TwoBit(_Variant):
    engine_serves: ClassVar[bool] = False  # our codebook formats (kernels/): no production engine
    num_samples: Annotated[int, Field(ge=1)] = 64
    time_budget_s: Annotated[float, Field(gt=0)] = Field(
        default=900, description="wall-clock budget for the whole model; past it the remaining layers "
        "get the method's cheap path and the record says so")
    hessian_damp: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.01, description="added to the diagonal of H / mean(diag H)")
    seed: int = 0
    finetune_epochs: Annotated[int, Field(ge=0)] = Field(
        default=2, description="end-to-end fine-tuning of the continuous parameters (signs/scales or "
        "codebooks, norms) on the baseline's logits; 0 turns it off")
    finetune_share: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.35, description="share of the budget the Hessians leave that is kept for fine-tuning; the "
        "layer loop gets the rest")
    finetune_lr: Annotated[float, Field(gt=0)] = 5e-4
    finetune_sign_lr: Annotated[float, Field(gt=0)] | None = Field(
        default=None, description="end-to-end Adam rate for QuIP#'s sign vectors; unset: finetune_lr")
    finetune_synthetic: Annotated[int, Field(ge=0)] = Field(
        default=0, description="sequences of 128 tokens the baseline writes itself from random first tokens "
        "(LLM-QAT's data-free distillation), tuned on beside the traffic end to end; 0: traffic only")
    code_update_fraction: Annotated[float, Field(ge=0, le=0.1)] = Field(
        default=0.0, description="codes that move during end-to-end fine-tuning (PV-tuning's V step): "
        "at most this share of a layer's code groups re-encoded per step, those that gain most "
        "(paper: ~0.01); 0 keeps the codes frozen")
    code_lr: Annotated[float, Field(gt=0)] = Field(
        default=0.05, description="the V step's straight-through Adam rate, as a share of the layer's "
        "weight RMS")
    sequential: bool = Field(
        default=True, description="quantize decoder block by block, each block's Hessians and tuning "
        "inputs from the already quantized blocks before it; false: every layer from the unquantized "
        "model's inputs, all at once")
    block_epochs: Annotated[int, Field(ge=0)] = Field(
        default=4, description="passes of fine-tuning inside a decoder block after each group of its "
        "layers is quantized (codes frozen; the rest of the block, norms, signs/scales or codebooks "
        "tuned to the original block's outputs); 0 turns it off")
    # 10x the QuIP# reference (5e-5 / 5e-4, for ~1M tokens on a GPU): at CPU budgets a group gets a
    # handful of Adam steps. QuIP# at 300 s on SmolLM2: PPL x2.88 at the reference rates, x2.08 at these.
    block_lr: Annotated[float, Field(gt=0)] = Field(default=5e-4, description="block tuning's Adam rate")
    block_sign_lr: Annotated[float, Field(gt=0)] = Field(
        default=5e-3, description="block tuning's Adam rate for QuIP#'s sign vectors")
    block_search_share: Annotated[float, Field(gt=0, le=1)] = Field(
        default=0.5, description="share of a group's time in the block-wise loop for its layers' own "
        "search (LDLQ, beam search); the rest tunes the block")
    resources: Resources = Resources(num_cpus=2, memory_gb=6)

    def weight_bits(self) -> float:
        """16-bit codes per 8 weights (E8P) or 2 x 8-bit codes per 8 weights (AQLM 2x8); QuIP#'s
        `residual` layers' second stage is not in it (its share depends on the model's shapes): the
        checkpoint's measured bits per weight count it."""
        return 2.0


class ResidualStage(Strict):
    """A second E8P stage on chosen Linears: the weight is stored as E8P(W̃) + E8P(what it left), 16
    more bits per 8 weights (4 bits per weight on those layers), as QuIP#'s residual vector
    quantization builds its 3- and 4-bit formats. Each stage is rounded with BlockLDLQ against the
    same Hessian, the second on the first's whole error. Sample (SmolLM2's later down_proj, 12.5 % of
    the weights: 2.30 bits per weight in all)::

        residual: {projections: [down_proj], first_block: 15}
    """

    projections: tuple[str, ...] = Field(
        min_length=1, description="the Linears' own names in each decoder block (down_proj, up_proj, ...)")
    first_block: Annotated[int, Field(ge=0)] = 0
    last_block: Annotated[int, Field(ge=0)] | None = Field(
        default=None, description="the last decoder block included; unset: to the end")

    @model_validator(mode="after")
    def _ordered(self) -> ResidualStage:
        if self.last_block is not None and self.last_block < self.first_block:
            raise ValueError(f"last_block={self.last_block} is before first_block={self.first_block}")
        return self

    def covers(self, name: str) -> bool:
        """`name` (model.layers.N.mlp.down_proj) is one of the projections in a chosen block."""
        parts = name.split(".")
        if "layers" not in parts or parts[-1] not in self.projections:
            return False
        index = parts[parts.index("layers") + 1]
        if not index.isdigit():
            return False
        last = self.last_block if self.last_block is not None else int(index)
        return self.first_block <= int(index) <= last


class QuipSharp2Bit(_TwoBit):
    """QuIP# at 2 bits: randomized Hadamard incoherence, E8P lattice codebook, BlockLDLQ rounding.

    Sample::

        - {name: quip_sharp_2bit, method: quip_sharp_2bit, time_budget_s: 900}
    """

    kernel: ClassVar[str] = "e8p"
    method: Literal["quip_sharp_2bit"]
    scale_grid: tuple[Annotated[float, Field(gt=0)], ...] = Field(
        default=(1.0,), min_length=1,
        description="target RMS of W̃ before E8P rounding; each layer keeps the candidate with the lowest "
                    "proxy loss (paper: ~0.9; the codebook's Gaussian optimum is ~1.04)")
    channel_powers: tuple[Annotated[float, Field(ge=0, le=1)], ...] = Field(
        default=(0.0, 0.5), min_length=1,
        description="input-channel normalizations tried per layer before the rotation: columns scaled "
                    "by (H_jj / mean H_jj)^(p/2), folded into S_U (free in the format); the lowest proxy "
                    "loss wins. 0: none. Outlier channels (massive activations) are what p > 0 is for")
    residual: ResidualStage | None = Field(
        default=None, description="layers that get a second E8P stage (4 bits per weight on them); "
        "unset: every layer at 2 bits")


class Aqlm2x8(_TwoBit):
    """AQLM with two 8-bit codebooks over groups of 8 inputs (2.199 bits per weight on SmolLM2 with
    fp16 codebooks, row scales and the rotation's sign vectors, measured; 2.153 without the rotation,
    2.306 with the fp32 codebooks stored before 2026-12-04).

    1x16 (one 65,536-entry codebook) is the better format on 7B models but pointless here: a
    per-layer 1 MiB codebook on a 576-wide layer costs ~18.6 bits per weight, more than the
    codes it serves. Sample::

        - {name: aqlm_2x8, method: aqlm_2x8, beam_size: 2, max_rounds: 3}
    """

    kernel: ClassVar[str] = "aqlm"
    method: Literal["aqlm_2x8"]
    beam_size: Annotated[int, Field(ge=1, le=64)] = 2
    max_rounds: Annotated[int, Field(ge=0)] = 3
    # SmolLM2's rotated layers (15 of layers 3, 12, 26, 32 samples): 10 Adam steps cost 40 % of a
    # round and lower the proxy loss 2 % (0.0434 -> 0.0425); a second beam pass in that time, 10 %
    # (0.0388). Block and end-to-end tuning fit the codebooks and scales to the outputs anyway.
    adam_steps: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Adam steps on the codebooks and row scales (codes fixed) before each "
        "round's beam search; 0: beam search only")
    # Rotated, at 300 s on SmolLM2: held-out KL before end-to-end 0.92 against 1.63-1.97 at 0 (PPL
    # x3.02 against x4.02-x5.06). Unrotated it was within the run-to-run spread (x4.76, x5.29).
    min_rounds: Annotated[int, Field(ge=0)] = Field(
        default=1, description="search rounds every layer started within the budget gets even past its "
        "share of it (both layer loops set the overrun aside for the layers left; a layer started near "
        "the budget's end may still overrun it by a round; layers started past it keep the k-means "
        "init); 0: k_proj/v_proj get none at 300 s")
    # SmolLM2 at 300 s: PPL x19.4 at 0, x10.0 at 0.5 (mean proxy loss 0.085 -> 0.052).
    input_channel_power: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.5, description="the inputs of q/k/v, gate/up and down_proj rescaled by "
        "(H_jj / mean H_jj)^(p/2) before quantizing, the inverse folded into the norm or up_proj's row "
        "scales (S_V when rotated; the format has no input scale); evens out massive-activation "
        "channels. 0: off")
    # SmolLM2 at 900 s, side by side: PPL x2.34 -> x1.69, GPL-3 x9.95 -> x4.18, KL before e2e
    # 1.27 -> 0.81 at the same mean proxy loss (0.027 / 0.028): the layers' errors stop adding up.
    incoherence: bool = Field(
        default=True, description="quantize W̃ = T_m W T_nᵀ against T_n H T_nᵀ (QuIP#'s randomized "
        "Hadamard transforms) instead of W: the layers' errors come out incoherent; the sign vectors "
        "are stored beside the codes and decode applies the transforms (quant_method `aqlm_rht`: a "
        "checkpoint the `aqlm` package cannot run)")


class BaselineBf16(_Variant):
    """Near-null control: the baseline with its weights rounded to bf16 (evaluated in `eval.dtype`
    like everything else). Near-lossless, yet greedy outputs differ on some items, so it exercises
    the gate's statistics where a bit-identical copy would not: it must never be rejected."""

    kernel: ClassVar[str] = "bf16"
    native_compute: ClassVar[str | None] = "bf16"
    method: Literal["baseline_bf16"]
    control: bool = True

    def weight_bits(self) -> float:
        return 16.0


# The registry: one line per method.
SPECS: tuple[type[_Variant], ...] = (BaselineBf16, Fp8W8A8, KvFp8, Int8W8A8, Fp8KvCache, Int4Rtn, Int4Gptq,
                                     Int4Awq, Int2Rtn,
                                     Int2Gptq,
                                     QuipSharp2Bit, Aqlm2x8)

VariantSpec = Annotated[Union[SPECS], Field(discriminator="method")]  # noqa: UP007 - built from a tuple

METHOD_NAMES: tuple[str, ...] = tuple(get_args(c.model_fields["method"].annotation)[0] for c in SPECS)
KERNELS: tuple[str, ...] = tuple(dict.fromkeys(c.kernel for c in SPECS))
ENGINE_SERVES: dict[str, bool] = {get_args(c.model_fields["method"].annotation)[0]: c.engine_serves
                                  for c in SPECS}
"""method -> whether a production engine (vLLM) loads its checkpoints."""
"""Kernel families, in first-use order: what a hardware profile says it can run."""
NATIVE_KERNELS: dict[str, str] = {c.kernel: c.native_compute for c in SPECS if c.native_compute}
"""Kernel family -> the compute format its native matmul uses."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(VariantSpec)


def variant_spec(data: dict[str, Any]) -> _Variant:
    """Validate one variant mapping (`{"name": ..., "method": ..., ...}`) into its spec."""
    return _ADAPTER.validate_python(data)
