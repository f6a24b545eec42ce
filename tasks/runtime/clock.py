"""Where a run's time went: wall seconds per flow stage (a stopwatch the flow laps), and wall and
CPU seconds per model and stage from the results the tasks return (CPU = the worker process's
time.process_time, every torch thread included, so CPU / wall shows how many cores a stage used)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelTime:
    model: str
    stage: str  # quantize | ppl | tasks | judge
    wall_s: float
    cpu_s: float = math.nan
    reused: bool = False


@dataclass
class Stopwatch:
    """Stages in the order they end; a stage lapped twice adds up."""

    laps: dict[str, float] = field(default_factory=dict)
    _start: float = field(default_factory=time.perf_counter)
    _last: float = field(default_factory=time.perf_counter)

    def lap(self, stage: str) -> float:
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0.0) + now - self._last
        self._last = now
        return now - self._start

    def total(self) -> float:
        return time.perf_counter() - self._start


@dataclass(frozen=True)
class RunTimes:
    stages: dict[str, float]  # flow stage -> wall seconds
    flow_s: float
    models: list[ModelTime]

    def metrics(self) -> dict[str, float]:
        """`time.<stage>_s` per flow stage and `time.flow_s`, for the parent MLflow run."""
        return {**{f"time.{k}_s": v for k, v in self.stages.items()}, "time.flow_s": self.flow_s}

    def table(self) -> str:
        lines = ["| flow stage | wall s | share |", "|---|---|---|"]
        lines += [f"| {k} | {v:.1f} | {v / self.flow_s:.0%} |" for k, v in self.stages.items()]
        lines.append(f"| **flow** | {self.flow_s:.1f} | 100% |")
        if self.models:
            lines += ["", "| model | stage | wall s | CPU s | cores used |", "|---|---|---|---|---|"]
            for m in self.models:
                cores = m.cpu_s / m.wall_s if m.wall_s > 0 and not math.isnan(m.cpu_s) else math.nan
                cpu = "-" if math.isnan(m.cpu_s) else f"{m.cpu_s:.1f}"
                lines.append(f"| {m.model} | {m.stage}{' (reused)' if m.reused else ''} | {m.wall_s:.1f} | "
                             f"{cpu} | {'-' if math.isnan(cores) else f'{cores:.2f}'} |")
        return "\n".join(lines)
