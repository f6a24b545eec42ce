"""The rollout report: its timeline (weight, each metric per window, every decision and its reason)
as markdown, and a plot of weight and metrics over time; both into the rollout's MLflow run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from quantgate.tasks.rollout.context import RolloutContext
from quantgate.tasks.rollout.log import RolloutLog


def _cell(m: dict[str, Any]) -> str:
    v = m["value"]
    num = {"error_rate": lambda: f"{v.get('canary_errors', 0)}/{v.get('canary_requests', 0)}",
           "latency": lambda: f"×{v['p95_ratio']:.2f}" if "p95_ratio" in v else "n/a",
           "tpot": lambda: f"×{v['p95_ratio']:.2f}" if "p95_ratio" in v else "n/a",
           "energy": lambda: f"×{v['p95_ratio']:.2f}" if "p95_ratio" in v else "n/a",
           "judge": lambda: f"{v.get('losses', 0)}L/{v.get('ties', 0)}T/{v.get('wins', 0)}W"}
    return f"{m['phase']} {num.get(m['metric'], lambda: '')()}"


def timeline_markdown(entries: list[dict[str, Any]]) -> str:
    start = entries[0]
    ctx = start["context"]
    t0 = start["t"]
    lines = [f"# Rollout {ctx['rollout_id']}: {ctx['variant']} (version {ctx['canary_version']}) against "
             f"champion version {ctx['champion_version']}", "",
             f"verdict at the offline gate: **{ctx['verdict']}**; steps {start['steps']} %; "
             f"faults injected: {ctx['faults'] or 'none'}", "",
             "| t (s) | event | weight | requests | error rate | latency p95 | TPOT p95 | "
             "J/token p95 (est.) | judge | note |",
             "|---:|---|---:|---:|---|---|---|---|---|---|"]
    for e in entries[1:]:
        t = f"{e['t'] - t0:.0f}"
        if e["event"] == "window":
            ms = {m["metric"]: _cell(m) for m in e["measurements"]}
            lines.append(f"| {t} | window | {e['weight']:.0%} | {e['sent']} | {ms.get('error_rate', '')} | "
                         f"{ms.get('latency', '')} | {ms.get('tpot', '')} | {ms.get('energy', '-')} | "
                         f"{ms.get('judge', '-')} | "
                         f"{e['statuses']} |")
        else:
            weight = f"{e['weight']:.0%}" if "weight" in e else ""
            note = e.get("reason") or e.get("outcome") or e.get("choice") or ""
            if e["event"] == "decision":
                note = f"**{e['outcome']}**: {e['reason']}"
            lines.append(f"| {t} | {e['event']} | {weight} |  |  |  |  |  |  | {note} |")
    return "\n".join(lines + _ray_serve_table(entries)) + "\n"


def _ray_serve_table(entries: list[dict[str, Any]]) -> list[str]:
    """Ray Serve's own per-deployment figures at the last window (cumulative since the app started)."""
    windows = [e for e in entries if e["event"] == "window" and e.get("ray_serve")]
    figures = windows[-1]["ray_serve"] if windows else None
    if not figures:
        return []
    lines = ["", "Ray Serve's own figures at the last window (since the app started; Prometheus series "
             "`ray_serve_deployment_*`):", "",
             "| deployment | requests | errors | latency mean ms | p50 ms | p95 ms | p99 ms |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for dep, f in figures.items():
        lines.append(f"| {dep} | {f['requests']} | {f['errors']} | {f['latency_ms_mean']:.0f} | "
                     f"{f['latency_ms_p50']:.0f} | {f['latency_ms_p95']:.0f} | {f['latency_ms_p99']:.0f} |")
    return lines


def plot(entries: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = entries[0]["t"]
    windows = [e for e in entries if e["event"] == "window"]
    fig, ax = plt.subplots(figsize=(8, 4))
    ts = [e["t"] - t0 for e in windows]
    ax.step([0, *ts], [0, *[e["weight"] * 100 for e in windows]], where="pre", label="canary weight (%)",
            color="black")
    ax.set_xlabel("seconds since the rollout started")
    ax.set_ylabel("weight (%)")
    ax2 = ax.twinx()
    for metric, key, label in (("latency", "p95_ratio", "latency p95 ratio"),
                               ("tpot", "p95_ratio", "TPOT p95 ratio"),
                               ("energy", "p95_ratio", "J/token p95 ratio (estimated)"),
                               ("error_rate", "canary_rate", "canary error rate"),
                               ("judge", "loss_share", "judge loss share")):
        ys = [next((m["value"].get(key) for m in e["measurements"] if m["metric"] == metric), None)
              for e in windows]
        pts = [(t, y) for t, y in zip(ts, ys, strict=True) if isinstance(y, int | float)]
        if pts:
            ax2.plot(*zip(*pts, strict=True), marker="o", label=label)
    ax2.set_ylabel("ratio / share")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    fig.legend(lines, [h.get_label() for h in lines], loc="upper left", fontsize=8)
    outcome = entries[-1]["event"]
    ax.set_title(f"rollout {entries[0]['context']['variant']}: {outcome}")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_report(ctx: RolloutContext) -> tuple[str, str]:
    """(markdown, path of the plot); both logged to the rollout's MLflow run."""
    log = RolloutLog.read(Path(ctx.log_path))
    md = timeline_markdown(log.entries)
    folder = Path(ctx.log_dir)
    (folder / "report.md").write_text(md)
    png = plot(log.entries, folder / "timeline.png")
    client = MlflowClient(tracking_uri=ctx.tracking_uri)
    client.log_artifact(ctx.mlflow_run_id, str(folder / "report.md"), "rollout")
    client.log_artifact(ctx.mlflow_run_id, str(png), "rollout")
    return md, str(png)
