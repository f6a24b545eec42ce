"""Has the traffic moved away from what the champion was calibrated on?

Compares the activation statistics of a recent traffic window with those of the champion's
calibration, layer by layer (`profile_drift`: RMS over input channels of log(mean |x| ratio)), and
says whether requantizing is due. Once a window has triggered requantization, a later window that
has not moved from *that* one triggers nothing new: a gate that kept the old champion must not be
asked again every hour about the same traffic.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from quantgate.kernels.activation_stats import profile_drift
from quantgate.tasks.calibrate.stats import calibration_drift, mean_abs_profiles
from quantgate.tasks.calibrate.window import TrafficWindow

LAST_TRIGGER = "LAST_TRIGGER"  # under <state>/drift: the stats of the window that last triggered


@dataclass(frozen=True)
class DriftReport:
    score: float
    threshold: float
    drifted: bool  # over the threshold against the champion's calibration
    trigger: bool  # drifted, and not from the window that last triggered requantization
    reason: str
    window: TrafficWindow
    window_stats: str
    reference_stats: str
    top_layers: list[tuple[str, float]]
    report_path: str

    def one_line(self) -> str:
        return f"drift {self.score:.3f} (threshold {self.threshold:g}): {self.reason}"


def layer_drifts(reference_stats: str, window_stats: str) -> dict[str, float]:
    a, b = mean_abs_profiles(reference_stats), mean_abs_profiles(window_stats)
    return {name: profile_drift(a[name], b[name]) for name in sorted(set(a) & set(b))}


def assess_drift(*, reference_stats: str, window_stats: str, window: TrafficWindow, threshold: float,
                 drift_dir: Path, top: int = 5) -> DriftReport:
    per_layer = layer_drifts(reference_stats, window_stats)
    if not per_layer:
        raise ValueError("the champion's calibration and the window share no layer: were they made on "
                         "one model?")
    score = sum(per_layer.values()) / len(per_layer)
    drifted, trigger = score > threshold, False
    if not drifted:
        reason = "within the threshold: the champion's calibration still fits the traffic"
    else:
        last = drift_dir / LAST_TRIGGER
        previous = last.read_text().strip() if last.is_file() else ""
        since = calibration_drift(previous, window_stats) if previous and Path(previous).is_file() else None
        if since is not None and since <= threshold:
            reason = (f"over the threshold, but only {since:.3f} from the window that last triggered "
                      "requantization: nothing new to requantize on")
        else:
            trigger = True
            reason = "over the threshold: requantize on this window"
    ranked = sorted(per_layer.items(), key=lambda kv: -kv[1])[:top]
    out = drift_dir / window.digest
    out.mkdir(parents=True, exist_ok=True)
    report = DriftReport(score, threshold, drifted, trigger, reason, window, window_stats, reference_stats,
                         ranked, str(out / "report.md"))
    (out / "report.json").write_text(json.dumps(asdict(report), indent=1), encoding="utf-8")
    Path(report.report_path).write_text(report_markdown(report), encoding="utf-8")
    return report


def record_trigger(report: DriftReport, drift_dir: Path) -> None:
    """Called once the drift event is out: later windows are compared with this one too."""
    (drift_dir / LAST_TRIGGER).write_text(report.window_stats, encoding="utf-8")


def report_markdown(r: DriftReport) -> str:
    rows = "\n".join(f"| `{name}` | {d:.3f} |" for name, d in r.top_layers)
    return (f"# Drift report\n\n**{r.one_line()}**\n\n"
            f"- window: the last {r.window.requests} complete requests of `{r.window.source}` "
            f"(`{r.window.path}`)\n- champion's calibration: `{r.reference_stats}`\n"
            f"- window's statistics: `{r.window_stats}`\n\n"
            f"Layers that moved most (RMS of log mean |activation| ratio over input channels):\n\n"
            f"| layer | drift |\n|---|---|\n{rows}\n")
