"""Each quantized variant as an MLflow 3 LoggedModel (the Models tab of its experiment), linked to its
child run, with its method's parameters, its verdict and its headline metrics; and the registered
version's description: what the checkpoint is and why it passed."""

from __future__ import annotations

import math

from mlflow.tracking import MlflowClient

from quantgate.tasks.gate.decide import VariantScores, Verdict


def log_variant_model(client: MlflowClient, experiment_id: str, run_id: str, scores: VariantScores,
                      verdict: Verdict, params: dict[str, str]) -> str | None:
    """The variant's LoggedModel id (None for a variant that produced no evaluated checkpoint)."""
    if scores.checkpoint is None or scores.eval is None:
        return None
    for found in client.search_logged_models([experiment_id], filter_string=f"name = '{scores.name}'"):
        if found.source_run_id == run_id:  # a publish that resumes after a crash: logged already
            return found.model_id
    model = client.create_logged_model(
        experiment_id, name=scores.name, source_run_id=run_id, model_type="quantized checkpoint",
        params={k: str(v)[:500] for k, v in params.items()},
        tags={"method": scores.method, "gate.verdict": verdict.status, "checkpoint": scores.checkpoint})
    headline = {"ppl": scores.eval.ppl, "size.bytes": float(scores.size_bytes),
                "size.bits_per_weight": scores.bits_per_weight}
    for key, value in headline.items():
        if math.isfinite(value):
            client.log_metric(run_id, key, value, model_id=model.model_id)
    client.finalize_logged_model(model.model_id, "READY")
    return model.model_id


def version_description(scores: VariantScores, verdict: Verdict, *, baseline_ppl: float, run_id: str) -> str:
    ratio = scores.eval.ppl / baseline_ppl if scores.eval is not None and baseline_ppl else float("nan")
    why = verdict.reasons[0] if verdict.reasons else "no reason recorded"
    return (f"{scores.name}: {scores.method}, {scores.bits_per_weight:.2f} bits per weight, perplexity "
            f"x{ratio:.3f} the baseline's on held-out traffic. Gate verdict `{verdict.status}` "
            f"(decided by {verdict.decided_by or '-'}): {why}. Evidence: MLflow run {run_id}.")
