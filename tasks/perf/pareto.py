"""The Pareto plot: quality recovery against J/token and against decode tokens/s, one point per model.

Quality is the lowest recovery the gate checked for the variant (perplexity overall and on its
worst slice, every lm-eval task metric and its worst slice): 1.0 is the baseline, the gate's
threshold is drawn as a line. A point is on the front when no other point is at least as good on
both axes and better on one. Figures come from the bench at one batch size, written in the title.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ParetoPoint:
    name: str
    quality: float  # lowest recovery the gate checked (baseline 1.0)
    j_per_token: float
    tok_s: float
    passed: bool
    reference: bool = False  # the baseline(s): drawn, never "passing"


def quality_of(verdict: object) -> float:
    """min(ppl recovery, worst PPL slice, every task recovery, worst task slice) of a gate Verdict."""
    values = [verdict.recovery, verdict.worst_recovery, *verdict.task_recovery.values(),
              verdict.worst_task_slice_recovery]
    values = [v for v in values if not math.isnan(v)]
    return min(values) if values else float("nan")


def pareto_front(points: list[ParetoPoint], *, x: str, x_lower_is_better: bool) -> list[str]:
    """Names of the points no other point dominates on (x, quality)."""
    def key(p: ParetoPoint) -> tuple[float, float]:
        value = getattr(p, x)
        return (value if x_lower_is_better else -value, -p.quality)  # both: lower is better

    usable = [p for p in points if not math.isnan(p.quality) and not math.isnan(getattr(p, x))]
    front = []
    for p in usable:
        kp = key(p)
        dominated = any(all(a <= b for a, b in zip(key(q), kp, strict=True)) and key(q) != kp for q in usable)
        if not dominated:
            front.append(p.name)
    return front


def plot_pareto(points: list[ParetoPoint], out_png: Path, *, threshold: float, batch: int,
                energy_method: str, machine: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    panels = (("j_per_token", True, f"J/token ({energy_method})"), ("tok_s", False, "decode tokens/s"))
    for ax, (x, lower, label) in zip(axes, panels, strict=True):
        front = set(pareto_front(points, x=x, x_lower_is_better=lower))
        on_front = sorted((p for p in points if p.name in front), key=lambda p: getattr(p, x))
        if len(on_front) > 1:
            ax.plot([getattr(p, x) for p in on_front], [p.quality for p in on_front], "--",
                    color="0.6", zorder=1, label="Pareto front")
        for p in points:
            if math.isnan(getattr(p, x)) or math.isnan(p.quality):
                continue
            color = "black" if p.reference else "tab:green" if p.passed else "tab:red"
            ax.scatter(getattr(p, x), p.quality, color=color, s=60 if p.name in front else 30, zorder=2)
            ax.annotate(p.name, (getattr(p, x), p.quality), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
        ax.axhline(threshold, color="tab:orange", lw=1, label=f"gate threshold {threshold}")
        ax.set_xlabel(label + (" (lower is better)" if lower else " (higher is better)"))
        ax.set_ylabel("quality: lowest recovery the gate checked")
        if min((p.quality for p in points if p.quality > 0), default=1.0) < 0.5:
            ax.set_yscale("log")  # collapsed variants (2-bit scalar) sit decades below the rest
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Quality vs energy and speed, batch {batch}; {machine}. "
                 "Green: passes the gate, red: fails, black: baseline.", fontsize=10)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png
