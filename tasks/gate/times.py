"""The run's timing table from what the stages returned: the flow's stage laps, and each model's
quantize, perplexity and task-eval wall and CPU seconds."""

from __future__ import annotations

import math

from quantgate.tasks.gate.decide import VariantScores
from quantgate.tasks.runtime.clock import ModelTime, RunTimes


def run_times(stages: dict[str, float], flow_s: float, baseline: VariantScores,
              variants: list[VariantScores]) -> RunTimes:
    rows = []
    for v in [baseline, *variants]:
        if v.name != "baseline" and not math.isnan(v.quantize_seconds):
            rows.append(ModelTime(v.name, "quantize", v.quantize_seconds, v.quantize_cpu_seconds))
        if v.eval is not None:
            rows.append(ModelTime(v.name, "ppl", v.eval.seconds, v.eval.cpu_seconds))
        if v.lmeval is not None:
            rows.append(ModelTime(v.name, "tasks", v.lmeval.seconds, v.lmeval.cpu_seconds))
        if v.long is not None:
            rows.append(ModelTime(v.name, "long context", v.long.seconds, v.long.cpu_seconds))
    return RunTimes(dict(stages), flow_s, rows)
