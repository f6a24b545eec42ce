"""A variant's evidence in stages, cheapest first, on one engine server.

The perplexity screen's first look (gate.screen_share of the held-out requests), then the rest of
them, then the task evals; a variant the screen rejects stops at that look (gate.staged) and skips
everything after. All of it runs on one server of the checkpoint (`engine/session.py`), started by
the first stage that needs it: a second look costs its requests and no second start-up, so a
variant rejected on a quarter of the requests (the usual fate of a collapsed control, or of W4A16 on
a 135M model) costs a quarter of a look plus one start-up. A checkpoint the engine does not serve
takes the reference path at every stage, labelled with the reason (`evaluate.stages`).
"""

from __future__ import annotations

from dataclasses import dataclass

from quantgate.conf.engine import EngineConf
from quantgate.conf.schema import EvalConf, GateConf, LmEvalConf
from quantgate.tasks.engine.session import EngineSession
from quantgate.tasks.evaluate.lmeval import LmEvalResult
from quantgate.tasks.evaluate.perplexity import EvalResult
from quantgate.tasks.evaluate.stages import evaluate_model, task_evals
from quantgate.tasks.gate.decide import VariantScores, Verdict, screen
from quantgate.tasks.traffic.prepare import PreparedTraffic


@dataclass(frozen=True)
class Look:
    stage: str  # "first look" (a share of the requests) or "screen" (all of them)
    verdict: Verdict


@dataclass(frozen=True)
class StagedScores:
    eval: EvalResult  # perplexity as far as the screen read: the first look, or every request
    looks: tuple[Look, ...]
    lmeval: LmEvalResult | None = None  # None: stopped at the screen, or the task evals failed
    lmeval_error: str = ""  # why the task evals failed (the perplexity evidence stands)

    @property
    def rejected(self) -> bool:
        """Stopped at the screen: no task evals were run."""
        return self.lmeval is None and not self.lmeval_error


def looks_of(gate: GateConf) -> tuple[str, ...]:
    """The perplexity looks a variant gets: two when the screen stops early, else one."""
    return ("first", "rest") if gate.two_looks else ("all",)


def score_in_stages(*, variant: str, checkpoint: str, traffic: PreparedTraffic, eval_conf: EvalConf,
                    lmeval_conf: LmEvalConf, engine: EngineConf, gate: GateConf, state_dir: str,
                    baseline: EvalResult, baseline_checkpoint: str, baseline_results_dir: str,
                    min_slice_tokens: int) -> StagedScores:
    """Each look and its screen, then the task evals unless a screen rejected (gate.staged); results
    are written beside the checkpoint, so a rerun reads them and starts no server."""
    base = VariantScores("baseline", "baseline", True, baseline)
    common = {"variant": variant, "checkpoint": checkpoint, "results_dir": checkpoint, "traffic": traffic,
              "engine": engine, "state_dir": state_dir, "baseline_checkpoint": baseline_checkpoint,
              "baseline_results_dir": baseline_results_dir}
    looks: list[Look] = []
    ppl: EvalResult | None = None
    with EngineSession(engine, state_dir, log_name=f"eval-{variant}") as session:
        for look in looks_of(gate):
            ppl = evaluate_model(**common, conf=eval_conf, baseline=baseline, look=look,
                                 first_share=gate.screen_share, first=ppl, session=session)
            verdict = screen(base, VariantScores(variant, "", False, ppl), gate,
                             min_slice_tokens=min_slice_tokens)
            looks.append(Look("first look" if look == "first" else "screen", verdict))
            if gate.staged and verdict.status == "reject":
                return StagedScores(ppl, tuple(looks))
        assert ppl is not None
        try:
            tasks = task_evals(**common, conf=lmeval_conf, dtype=eval_conf.dtype, is_baseline=False,
                               session=session)
        except Exception as exc:  # noqa: BLE001 - the variant's perplexity evidence stands without them
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
            return StagedScores(ppl, tuple(looks), lmeval_error=why)
    return StagedScores(ppl, tuple(looks), tasks)
