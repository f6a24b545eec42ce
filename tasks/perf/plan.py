"""The roofline plan for a run: each variant on the serving target, and predictions for the bench.

Before quantizing, `plan_variants` says per variant what the target can do with it (native,
weight-only or no kernel), the predicted decode-step speedup and whether to skip it. After the
bench, `predicted_speedups` re-plans on the machine that ran the bench, with each variant's
measured bits per weight and the bench's batch sizes, so predicted sits next to measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from quantgate.conf.hardware import HardwareProfile, hardware_profile
from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import PlanConf
from quantgate.tasks.perf.roofline import ModelShape, VariantPlan, plan_variant


def model_shape(model_path: str) -> ModelShape:
    return ModelShape.from_hf_config(json.loads((Path(model_path) / "config.json").read_text()))


def plan_variants(conf: PlanConf, model_path: str, specs: list[VariantSpec]) -> dict[str, VariantPlan]:
    shape, profile = model_shape(model_path), hardware_profile(conf.target)
    return {s.name: plan_variant(s, shape, profile, batch=conf.batch, context=conf.context,
                                 num_devices=conf.num_devices, min_speedup=conf.min_speedup)
            for s in specs}


def predicted_speedups(model_path: str, profile: HardwareProfile | str, specs: list[VariantSpec],
                       bits: dict[str, float], *, batch_sizes: tuple[int, ...], context: int,
                       baseline_bits: float = 32, variant_base_bits: float = 16
                       ) -> dict[str, dict[int, float]]:
    """{variant: {batch: predicted speedup over the baseline}} from the bits per weight each variant
    reads at run time; the bench's baseline is fp32 and its variants run lm_head and KV in bf16.
    `context` is the mean context of the bench's decode window (prompt + half the new tokens)."""
    shape = model_shape(model_path)
    prof = hardware_profile(profile) if isinstance(profile, str) else profile
    return {s.name: {b: plan_variant(s, shape, prof, batch=b, context=context,
                                     bits_per_weight=bits.get(s.name), baseline_bits=baseline_bits,
                                     variant_base_bits=variant_base_bits, min_speedup=0.0).predicted_speedup
                     for b in batch_sizes}
            for s in specs}


def plan_lines(plans: dict[str, VariantPlan], conf: PlanConf, controls: set[str]) -> list[str]:
    lines = [f"Roofline plan on `{conf.target}`, batch {conf.batch}, context {conf.context}:"]
    for p in plans.values():
        v = p.variant
        if p.skip and conf.skip:
            verdict = (f"control, measured anyway: {p.reason}" if p.name in controls
                       else f"SKIPPED: {p.reason}")
        else:
            verdict = p.note
        mb = (v.weight_bytes + v.kv_bytes) / 1e6
        lines.append(f"- {p.name}: {p.support}, predicted ×{p.predicted_speedup:.2f} ({v.bound}-bound, "
                     f"{mb:.1f} MB/step)" + (f"; {verdict}" if verdict else ""))
    return lines


@dataclass(frozen=True)
class RunPlan:
    """What the run does with each variant: its roofline plan, and whether it is quantized."""

    plans: dict[str, VariantPlan]
    runnable: tuple[VariantSpec, ...]
    skipped: dict[str, str]  # variant -> why it is not quantized (the planner, missing GPUs)
    lines: tuple[str, ...]  # the plan as the run prints and reports it
    refused: dict[str, str] = field(default_factory=dict)  # the engine refused its format here

    def on_reference_path(self, backend: str) -> list[str]:
        """The runnable variants scored on the reference path against a baseline scored there, where
        the baseline itself is scored by the engine: in a format no production engine serves, or one
        the engine refused here."""
        if backend != "engine":  # everything is, the baseline's own evaluation included
            return []
        return [s.name for s in self.runnable if not type(s).engine_serves or s.name in self.refused]


def plan_run(conf: PlanConf, model_path: str, specs: list[VariantSpec], *, gpus: float,
             refused: dict[str, str] | None = None) -> RunPlan:
    """The planner's skips apply to non-control variants when `plan.skip` is on (controls are measured
    anyway); `refused`: variant -> why the serving engine refused its format on this machine before
    (learnt from its start-ups, `engine/support.py`), skipped before it is quantized; a variant asking
    for more GPUs than the cluster has is not submitted (Ray would queue it forever) and says which
    key to change."""
    plans = plan_variants(conf, model_path, specs)
    refused = {n: why for n, why in (refused or {}).items() if why}
    runnable, skipped = [], {}
    for spec in specs:
        plan = plans[spec.name]
        if spec.name in refused and conf.skip and not spec.control:
            skipped[spec.name] = f"skipped by the planner: {refused[spec.name]}"
        elif plan.skip and conf.skip and not spec.control:
            skipped[spec.name] = f"skipped by the planner: {plan.reason}"
        elif spec.resources.num_gpus > gpus:
            skipped[spec.name] = (f"variants[{spec.name}].resources.num_gpus={spec.resources.num_gpus} "
                                  f"but the Ray cluster has {gpus:g} GPU")
        else:
            runnable.append(spec)
    lines = plan_lines(plans, conf, {s.name for s in specs if s.control})
    lines += [f"- {name}: " + ("SKIPPED" if name in skipped else "control, measured anyway on the reference "
                                "path") + f": the serving engine refused its format here before: {why}"
              for name, why in refused.items()]
    return RunPlan(plans, tuple(runnable), skipped, tuple(lines), refused)
