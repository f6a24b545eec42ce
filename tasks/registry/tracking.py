"""MLflow runs: one parent run per pipeline run, one child run per variant, their metrics.

Names follow DESIGN.md. Slice metrics are `ppl.<key>.<value>` (MLflow metric names do not
allow `=`). The registry and its aliases are in `aliases.py`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Run, RunStatus, RunTag
from mlflow.tracking import MlflowClient

from quantgate.conf.settings import env_settings
from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.gate.decide import VariantScores, Verdict
from quantgate.tasks.judge.pairwise import JudgeSummary

_BAD_METRIC_CHARS = re.compile(r"[^\w\-. /]")


def tracking_uri(configured: str | None, state_dir: Path) -> str:
    """MLFLOW_TRACKING_URI wins, then the config, then SQLite under the state dir."""
    return (env_settings().mlflow_tracking_uri or configured
            or f"sqlite:///{(state_dir / 'mlflow.db').resolve()}")


def metric_name(*parts: str) -> str:
    return _BAD_METRIC_CHARS.sub("_", ".".join(parts).replace("=", "."))


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path) -> str:
    """The experiment's id, created if new. With a tracking server (http), its artifact root is the
    server's (`--artifacts-destination`: artifacts go through the server, so a worker on another node
    writes where the driver reads); with a local store, `artifact_root` on this disk."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    if client.tracking_uri.startswith(("http://", "https://")):
        return client.create_experiment(name)
    artifact_root.mkdir(parents=True, exist_ok=True)
    return client.create_experiment(name, artifact_location=artifact_root.resolve().as_uri())


def eval_metrics(result: EvalResult) -> dict[str, float]:
    metrics = {"ppl": result.ppl, "eval.tokens": float(result.tokens),
               "eval.kv_cache_quantized_layers": float(result.kv_cache_quantized_layers),
               "eval.seconds": result.seconds}
    for name, s in result.slices.items():
        metrics[metric_name("ppl", name)] = s.ppl
        metrics[metric_name("tokens", name)] = float(s.tokens)
    return metrics


def lmeval_metrics(result: LmEvalResult) -> dict[str, float]:
    metrics = {metric_name("lmeval", k): v for k, v in result.metrics.items()}
    metrics |= {metric_name("lmeval", k, "stderr"): v for k, v in result.stderr.items()}
    for metric, slices in result.slices.items():
        for name, (mean, _) in slices.items():
            metrics[metric_name("lmeval", metric, name)] = mean
    return metrics


def quantize_note_metrics(checkpoint: str) -> dict[str, float]:
    """`quantize.<note>` for the numeric notes a method left in its variant record (2-bit methods:
    mean proxy loss, layers that ran out of budget, Hessian time)."""
    record = Path(checkpoint) / "quantgate_variant.json"
    notes = json.loads(record.read_text()).get("notes", {}) if record.is_file() else {}
    return {f"quantize.{k}": float(v) for k, v in notes.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def judge_metrics(summary: JudgeSummary) -> dict[str, float]:
    decided = max(summary.decided, 1)
    return {"judge.win_rate": summary.wins / decided, "judge.win_or_tie": summary.win_or_tie,
            "judge.ci_low": summary.ci_low, "judge.ci_high": summary.ci_high,
            "judge.pairs": float(summary.pairs), "judge.identical": float(summary.identical),
            "judge.decided": float(summary.decided), "judge.inconsistent": float(summary.inconsistent),
            "judge.unparseable": float(summary.unparseable), "judge.errors": float(summary.errors),
            "judge.swap_consistency": summary.swap_consistency}


def verdict_metrics(verdict: Verdict) -> dict[str, float]:
    """Point recoveries, and each paired interval as `gate.<metric>[.<slice>].delta_low/high`
    (relative degradation, positive = worse) with its estimate, p-value and flips."""
    metrics = {"recovery.ppl": verdict.recovery, "recovery.ppl.worst_slice": verdict.worst_recovery,
               "gate.passed": float(verdict.passed)}
    metrics |= {metric_name("recovery", k): v for k, v in verdict.task_recovery.items()}
    if verdict.worst_task_slice:
        metrics["recovery.lmeval.worst_slice"] = verdict.worst_task_slice_recovery
    for c in verdict.checks:
        name = metric_name("gate", c.metric, *([] if c.slice == "overall" else [c.slice]))
        i = c.interval
        metrics |= {f"{name}.delta": i.estimate, f"{name}.delta_low": i.low, f"{name}.delta_high": i.high,
                    f"{name}.p_beyond": i.p_beyond, f"{name}.n": float(i.n)}
        if c.flips is not None:
            metrics[f"{name}.flips"] = c.flips.share
    return metrics


def verdict_tags(verdict: Verdict) -> dict[str, str]:
    return {"gate.verdict": verdict.status, "gate.decided_by": verdict.decided_by,
            "gate.stage": verdict.stage, "gate.reason": "; ".join(verdict.reasons)[:4000]}


def log_child_run(
    client: MlflowClient, *, experiment_id: str, parent_run_id: str, scores: VariantScores,
    verdict: Verdict | None, tags: dict[str, str], params: dict[str, Any],
    artifacts: list[str],
) -> str:
    """The child run of `scores.name` under the parent: an existing finished one is returned as it is
    (publishing is idempotent); otherwise it is created (or resumed) and logged."""
    existing = find_run(client, experiment_id, {"mlflow.parentRunId": parent_run_id, "variant": scores.name})
    if existing is not None and existing.info.status != "RUNNING":
        return existing.info.run_id
    rid = existing.info.run_id if existing is not None else client.create_run(
        experiment_id, run_name=scores.name, tags={"mlflow.parentRunId": parent_run_id,
                                                   "variant": scores.name, "method": scores.method,
                                                   **tags}).info.run_id
    log_params(client, rid, params)
    metrics: dict[str, float] = {}
    if scores.eval is not None:
        metrics |= eval_metrics(scores.eval)
        metrics |= {"size.bytes": float(scores.size_bytes),
                    "size.bits_per_weight": scores.bits_per_weight,
                    "time.quantize_s": scores.quantize_seconds}
    if scores.lmeval is not None:
        metrics |= lmeval_metrics(scores.lmeval)
    if scores.judge is not None:
        metrics |= judge_metrics(scores.judge)
    if scores.long is not None:  # the long-context probe: perplexity by position, passkeys
        long = scores.long
        metrics |= {"long.ppl": long.perplexity.ppl, "long.passkey_acc": long.passkey_accuracy,
                    "long.context": float(long.context)}
        metrics |= {metric_name("long.ppl", k): s.ppl for k, s in long.perplexity.slices.items()}
    if scores.checkpoint is not None and scores.eval is not None:
        metrics |= quantize_note_metrics(scores.checkpoint)
    if verdict is not None and scores.eval is not None:
        metrics |= verdict_metrics(verdict)
    metrics |= scores.perf
    log_metrics(client, rid, {k: v for k, v in metrics.items() if v == v})  # NaN: not measured
    if verdict is not None:
        client.log_batch(rid, tags=[RunTag(k, v) for k, v in verdict_tags(verdict).items()])
    if verdict is not None and verdict.worst_slice:
        client.set_tag(rid, "gate.worst_slice", verdict.worst_slice)
    if verdict is not None and verdict.worst_task_slice:
        client.set_tag(rid, "gate.worst_task_slice", verdict.worst_task_slice)
    if verdict is not None and verdict.notes:
        client.set_tag(rid, "gate.notes", "; ".join(verdict.notes)[:4000])
    if scores.error:
        client.set_tag(rid, "error", scores.error[:4000])
    if scores.eval is not None:  # what scored it: the serving engine, or the reference path and why
        client.set_tag(rid, "eval.scored_by", scores.eval.scored_by)
        if scores.eval.not_served:
            client.set_tag(rid, "eval.not_served", scores.eval.not_served[:4000])
    if scores.lmeval is not None and scores.lmeval.scored_by:  # the task evals' engine, likewise
        client.set_tag(rid, "lmeval.scored_by", scores.lmeval.scored_by)
        if scores.lmeval.not_served:
            client.set_tag(rid, "lmeval.not_served", scores.lmeval.not_served[:4000])
    for path in artifacts:
        client.log_artifact(rid, path)
    status = (RunStatus.FINISHED if scores.eval is not None
              else RunStatus.KILLED if scores.error.startswith("skipped") else RunStatus.FAILED)
    client.set_terminated(rid, RunStatus.to_string(status))
    return rid


def find_run(client: MlflowClient, experiment_id: str, tags: dict[str, str]) -> Run | None:
    """The oldest run of the experiment carrying all these tag values, or None."""
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    found = client.search_runs([experiment_id], query, order_by=["attributes.start_time ASC"], max_results=1)
    return found[0] if found else None


def flat_params(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: dotted keys, scalar values as text, lists joined."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flat_params(value, f"{name}.")
        elif isinstance(value, list | tuple):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = "" if value is None else str(value)
    return {k: v[:6000] for k, v in out.items()}  # MLflow's limit on a param value


def log_params(client: MlflowClient, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    batch = [Param(k, v) for k, v in params.items()]
    for i in range(0, len(batch), 100):  # MLflow takes at most 100 params per batch
        client.log_batch(run_id, params=batch[i : i + 100])


def log_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for i in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[i : i + 500])
