"""MLflow: one parent run per flow run, one child run per variant, the registry and aliases.

Names follow DESIGN.md. Slice metrics are `ppl.<key>.<value>` (MLflow metric names do not
allow `=`). MLflow keeps no alias history, so every alias move is also written as a
registered-model tag `alias_log.<seq>` (JSON: alias, version, previous, reason, time).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from mlflow.entities import RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.gate.decide import VariantScores, Verdict
from quantgate.tasks.judge.pairwise import JudgeSummary

_BAD_METRIC_CHARS = re.compile(r"[^\w\-. /]")


def tracking_uri(configured: str | None, state_dir: Path) -> str:
    """MLFLOW_TRACKING_URI wins, then the config, then SQLite under the state dir."""
    return (os.environ.get("MLFLOW_TRACKING_URI") or configured
            or f"sqlite:///{(state_dir / 'mlflow.db').resolve()}")


def metric_name(*parts: str) -> str:
    return _BAD_METRIC_CHARS.sub("_", ".".join(parts).replace("=", "."))


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
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
    metrics = {"recovery.ppl": verdict.recovery, "recovery.ppl.worst_slice": verdict.worst_recovery,
               "gate.passed": float(verdict.passed)}
    metrics |= {metric_name("recovery", k): v for k, v in verdict.task_recovery.items()}
    if verdict.worst_task_slice:
        metrics["recovery.lmeval.worst_slice"] = verdict.worst_task_slice_recovery
    return metrics


def log_child_run(
    client: MlflowClient, *, experiment_id: str, parent_run_id: str, scores: VariantScores,
    verdict: Verdict | None, tags: dict[str, str], params: dict[str, Any],
    artifacts: list[str],
) -> str:
    run = client.create_run(experiment_id, run_name=scores.name,
                            tags={"mlflow.parentRunId": parent_run_id, "variant": scores.name,
                                  "method": scores.method, **tags})
    rid = run.info.run_id
    for k, v in params.items():
        client.log_param(rid, k, v)
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
    if verdict is not None and scores.eval is not None:
        metrics |= verdict_metrics(verdict)
    metrics |= scores.perf
    log_metrics(client, rid, {k: v for k, v in metrics.items() if v == v})  # NaN: not measured
    if verdict is not None and verdict.worst_slice:
        client.set_tag(rid, "gate.worst_slice", verdict.worst_slice)
    if verdict is not None and verdict.worst_task_slice:
        client.set_tag(rid, "gate.worst_task_slice", verdict.worst_task_slice)
    if verdict is not None and verdict.notes:
        client.set_tag(rid, "gate.notes", "; ".join(verdict.notes)[:4000])
    if scores.error:
        client.set_tag(rid, "error", scores.error[:4000])
    for path in artifacts:
        client.log_artifact(rid, path)
    status = (RunStatus.FINISHED if scores.eval is not None
              else RunStatus.KILLED if scores.error.startswith("skipped") else RunStatus.FAILED)
    client.set_terminated(rid, RunStatus.to_string(status))
    return rid


def log_metrics(client: MlflowClient, run_id: str, metrics: dict[str, float]) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, 0) for k, v in metrics.items()]
    for i in range(0, len(batch), 500):
        client.log_batch(run_id, metrics=batch[i : i + 500])


def register_version(client: MlflowClient, model_name: str, run_id: str, checkpoint: str) -> str:
    """Copy the checkpoint into the run's artifacts and register it as a model version."""
    client.log_artifacts(run_id, checkpoint, artifact_path="checkpoint")
    try:
        client.create_registered_model(model_name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    source = f"{client.get_run(run_id).info.artifact_uri}/checkpoint"
    return client.create_model_version(model_name, source=source, run_id=run_id).version


def move_alias(
    client: MlflowClient, model_name: str, alias: str, version: str | None, *, reason: str
) -> None:
    """Point `alias` at `version` (None removes it) and append the move to the alias log."""
    try:
        previous = client.get_model_version_by_alias(model_name, alias).version
    except MlflowException:
        previous = None
    if previous == version:
        return  # idempotent: the same move twice changes nothing the second time
    if version is None:
        client.delete_registered_model_alias(model_name, alias)
    else:
        client.set_registered_model_alias(model_name, alias, version)
    seq = len(alias_history(client, model_name))
    entry = {"alias": alias, "version": version, "previous": previous, "reason": reason,
             "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    client.set_registered_model_tag(model_name, f"alias_log.{seq:05d}", json.dumps(entry))


def alias_history(client: MlflowClient, model_name: str) -> list[dict[str, Any]]:
    tags = client.get_registered_model(model_name).tags
    return [json.loads(tags[k]) for k in sorted(tags) if k.startswith("alias_log.")]
