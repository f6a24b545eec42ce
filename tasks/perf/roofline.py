"""Roofline planner: which variants can be faster on a target, before anything is quantized.

One decode step reads every weight once (whatever the batch) and, for attention, the whole KV
cache of every sequence in the batch; it does 2 x params x batch FLOPs in the matmuls plus
4 x layers x heads x head_dim x context x batch in attention (QK^T and AV, 2 FLOPs per
multiply-add each). So

    step >= max(bytes / bandwidth, flops / peak)

and the step is memory-bound while flops/bytes (the intensity) is below the target's ridge
(peak / bandwidth). At fp16 the matmul intensity is ~batch FLOP/byte, so decode stays
memory-bound to batch ~300 on a 1000 TFLOP/s, 3.3 TB/s GPU; 4-bit weights quadruple it (ridge
near batch 76). Weight-only formats (W4A16, 2-bit, codebooks) shrink the weight bytes only:
compute stays bf16. Native W8A8 FP8 also raises the peak; an FP8 KV cache halves the KV bytes.
At large batch x context the KV dominates the bytes (70B, batch 128, 8000 tokens: 140 GB of
weights against 335.5 GB of KV), so INT4 weights buy at most ~1.28x there, which is why INT4
gave no speedup at batch 128 in the seed's example, and the KV cache is what to quantize.

Everything here is a lower bound on step time: peak rates, no dequantization cost, no kernel
launch or scheduling overhead, and with `num_devices` > 1 perfect tensor parallelism with no
communication. Embedding rows looked up per step (batch x hidden) and norms are ignored; the
lm_head (vocab x hidden) is read every step even when tied, at the baseline precision, since no
variant quantizes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from quantgate.conf.hardware import HardwareProfile
from quantgate.conf.methods import VariantSpec


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a config.json dict with LlamaConfig keys; head_dim defaults to hidden // heads."""
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        return cls(layers=config["num_hidden_layers"], hidden=hidden,
                   intermediate=config["intermediate_size"], heads=heads,
                   kv_heads=config.get("num_key_value_heads") or heads,
                   head_dim=config.get("head_dim") or hidden // heads, vocab=config["vocab_size"],
                   tied_embeddings=bool(config.get("tie_word_embeddings", False)))

    @property
    def linear_params(self) -> int:
        """q, k, v, o and gate, up, down over all layers: the Linears the variants quantize."""
        attn = 2 * self.hidden * self.heads * self.head_dim + 2 * self.hidden * self.kv_heads * self.head_dim
        return self.layers * (attn + 3 * self.hidden * self.intermediate)

    @property
    def lm_head_params(self) -> int:
        """vocab x hidden, read every decode step even when tied to the embedding."""
        return self.vocab * self.hidden

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


@dataclass(frozen=True)
class Footprint:
    """What one variant reads and computes per decode step."""

    weight_bits: float  # per weight of the quantized Linears, counting scales/codebooks
    lm_head_bits: float  # never quantized: the baseline precision
    kv_bits: float  # baseline precision, or 8 for kv_fp8
    compute_format: str  # key into HardwareProfile.tflops when the target runs the method natively


def baseline_footprint(bits: float = 16) -> Footprint:
    """The unquantized model: every weight and the KV cache at `bits` (fp32 or bf16 compute)."""
    return Footprint(bits, bits, bits, "fp32" if bits > 16 else "bf16")


def footprint(spec: VariantSpec, *, bits_per_weight: float | None = None, baseline_bits: float = 16
              ) -> Footprint:
    """What `spec` reads per decode step, from the method's own description (`conf.methods`):
    its nominal bits per weight unless `bits_per_weight` (measured, e.g. by `tasks.model.size`, or
    what a target's kernel holds in memory) is given; its KV-cache width; its native compute format
    (fp8 for W8A8), else the baseline's, which `plan_step` replaces by the target's weight-only
    format when the target does not run the method natively."""
    base = baseline_footprint(baseline_bits)
    bits = spec.weight_bits() if bits_per_weight is None else bits_per_weight
    return Footprint(weight_bits=bits, lm_head_bits=baseline_bits, kv_bits=spec.kv_bits or baseline_bits,
                     compute_format=spec.native_compute or base.compute_format)


@dataclass(frozen=True)
class StepEstimate:
    weight_bytes: float
    kv_bytes: float
    flops: float
    t_memory_s: float
    t_compute_s: float
    step_s: float  # max(memory, compute): a lower bound
    bound: Literal["memory", "compute"]
    intensity: float  # flops / bytes
    ridge: float  # the target's flops per byte at the compute format used


def plan_step(shape: ModelShape, profile: HardwareProfile, fp: Footprint, *, batch: int, context: int,
              num_devices: int = 1, support: str = "native") -> StepEstimate:
    """One decode step of `batch` sequences, each attending over `context` cached tokens."""
    if batch < 1 or context < 0 or num_devices < 1:
        raise ValueError(f"need batch >= 1, context >= 0, num_devices >= 1 (got {batch}, {context}, "
                         f"{num_devices})")
    if support == "native":
        fmt = fp.compute_format
        if fmt not in profile.tflops:
            raise ValueError(f"{profile.name} has no {fmt!r} peak (tflops: {', '.join(profile.tflops)})")
    else:
        fmt = profile.weight_only_format()
    weight_bytes = (shape.linear_params * fp.weight_bits + shape.lm_head_params * fp.lm_head_bits) / 8
    kv_bytes = batch * context * shape.kv_bytes_per_token(fp.kv_bits / 8)
    flops = (2 * (shape.linear_params + shape.lm_head_params) * batch
             + 4 * shape.layers * shape.heads * shape.head_dim * context * batch)
    bandwidth = profile.mem_bandwidth_gbs * 1e9 * num_devices
    peak = profile.tflops[fmt] * 1e12 * num_devices
    t_mem, t_comp = (weight_bytes + kv_bytes) / bandwidth, flops / peak
    return StepEstimate(weight_bytes=weight_bytes, kv_bytes=kv_bytes, flops=flops, t_memory_s=t_mem,
                        t_compute_s=t_comp, step_s=max(t_mem, t_comp),
                        bound="memory" if t_mem >= t_comp else "compute",
                        intensity=flops / (weight_bytes + kv_bytes), ridge=peak / bandwidth)


@dataclass(frozen=True)
class VariantPlan:
    name: str
    method: str
    support: str
    note: str
    skip: bool
    reason: str  # never empty: why skipped, or what the roofline predicts
    baseline: StepEstimate
    variant: StepEstimate
    predicted_speedup: float  # baseline.step_s / variant.step_s


def plan_variant(spec: VariantSpec, shape: ModelShape, profile: HardwareProfile, *, batch: int,
                 context: int, bits_per_weight: float | None = None, baseline_bits: float = 16,
                 num_devices: int = 1, min_speedup: float,
                 variant_base_bits: float | None = None) -> VariantPlan:
    """Predict `spec`'s decode speedup over the baseline on `profile`; skip it when the target has no
    kernel for it or the predicted speedup is below `min_speedup`.

    `variant_base_bits`: the precision of the variant's unquantized parts (lm_head, KV) when it
    differs from the baseline's, e.g. bf16 variants measured against an fp32 baseline on a CPU.

    A method with support "none" would run dequantized at the baseline precision: its variant
    estimate is the baseline's (speedup 1.0).
    """
    support, note = profile.formats[spec.kernel], profile.notes.get(spec.kernel, "")
    kw: dict[str, Any] = {"batch": batch, "context": context, "num_devices": num_devices}
    base = plan_step(shape, profile, baseline_footprint(baseline_bits), **kw)
    if support == "none":
        var = base
    else:
        if bits_per_weight is None:  # what the target's kernel holds, where it widens the format
            bits_per_weight = profile.runtime_bits.get(spec.kernel)
        fp = footprint(spec, bits_per_weight=bits_per_weight,
                       baseline_bits=variant_base_bits or baseline_bits)
        var = plan_step(shape, profile, fp, support=support, **kw)
    speedup = base.step_s / var.step_s
    where = (f"{var.bound}-bound at batch {batch}, context {context} on {num_devices} x "
             f"{profile.description}")
    if support == "none":
        why = note or "no kernel path"
        skip, reason = True, f"{profile.description} has no kernel for {spec.method}: {why}"
    elif speedup < min_speedup:
        skip, reason = True, f"predicted speedup {speedup:.2f}x < {min_speedup:.2f}x ({where})"
    else:
        skip, reason = False, f"predicted speedup {speedup:.2f}x ({where})"
    return VariantPlan(name=spec.name, method=spec.method, support=support, note=note, skip=skip,
                       reason=reason, baseline=base, variant=var, predicted_speedup=speedup)
