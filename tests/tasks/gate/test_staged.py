"""A variant scored in stages on one engine server (tasks/gate/staged.py): its two perplexity looks
and its task evals share one start-up; a variant the first look rejects reads no more requests and
runs no task evals; a rerun reads every stage from disk and starts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantgate.conf.engine import EngineConf
from quantgate.conf.schema import EvalConf, GateConf, LmEvalConf
from quantgate.tasks.evaluate.stages import evaluate_task
from quantgate.tasks.gate.staged import score_in_stages

from factories import heldout_traffic, perturbed_copy

pytestmark = pytest.mark.timeout(900)

FP32 = EngineConf(dtype="float32", max_model_len=512, start_timeout_s=300)
# A random tiny model's next-token distributions are near-uniform (tied embeddings at init scale):
# noise of 0.5 on its layers moves its KL by ~1e-4 nats/token, 1e-4 by nothing to speak of. The
# screen decides on KL at that scale here.
GATE = GateConf(screen_share=0.25, budgets={"kl": {"enable": 1e-6, "monitor": 2e-6, "investigate": 5e-6}})


def _startups(state: Path, log_name: str) -> int:
    log = state / "engine-logs" / f"{log_name}.log"
    return log.read_text(errors="replace").count("Starting vLLM server") if log.exists() else 0


def test_looks_and_task_evals_share_one_server_and_a_first_look_reject_reads_no_more(
        tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # this machine's memory, fresh
    traffic = heldout_traffic(tmp_path, 40)
    eval_conf = EvalConf(window=64, min_slice_tokens=10, backend="engine")
    state = tmp_path / "state"
    base_dir = str(tmp_path / "base")
    base = evaluate_task.fn(variant="baseline", checkpoint=tiny_model, results_dir=base_dir, traffic=traffic,
                            conf=eval_conf, engine=FP32, state_dir=str(state))

    def scored(name: str, checkpoint: Path):
        return score_in_stages(
            variant=name, checkpoint=str(checkpoint), traffic=traffic, eval_conf=eval_conf,
            lmeval_conf=LmEvalConf(tasks=("qg_facts_mc",), limit=4, batch_size=4, backend="engine"),
            engine=FP32, gate=GATE, state_dir=str(state), baseline=base,
            baseline_checkpoint=tiny_model, baseline_results_dir=base_dir, min_slice_tokens=10)

    kept = scored("kept", perturbed_copy(tiny_model, tmp_path / "kept", 1e-4))
    assert [look.stage for look in kept.looks] == ["first look", "screen"], kept.looks
    assert kept.looks[0].verdict.status != "reject" and not kept.rejected
    assert kept.eval.look == "both" and len(kept.eval.requests) == 40
    assert kept.eval.scored_by.startswith("vllm") and kept.eval.engine_startup_s > 0
    assert kept.lmeval is not None and kept.lmeval.scored_by.startswith("vllm")
    assert _startups(state, "eval-kept") == 1  # both looks and the task evals on one server
    assert not (state / "engine-logs" / "lmeval-kept.log").exists()

    broken = scored("broken", perturbed_copy(tiny_model, tmp_path / "broken", 0.5))
    assert [look.stage for look in broken.looks] == ["first look"], broken.looks[0].verdict.reasons
    assert broken.looks[0].verdict.status == "reject" and broken.rejected
    assert broken.looks[0].verdict.reasons[0].startswith("first look (10 of 40 requests")
    assert broken.eval.look == "first" and len(broken.eval.requests) == 10 and broken.lmeval is None
    assert _startups(state, "eval-broken") == 1

    again = scored("kept", tmp_path / "kept")  # every stage's result is on disk: no server
    assert _startups(state, "eval-kept") == 1
    assert again.eval.ppl == kept.eval.ppl and again.lmeval.metrics == kept.lmeval.metrics
