"""Prefect task for the judge: one variant's replay answers against the baseline's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE, CacheKeyFnPolicy

from quantgate.conf.schema import JudgeConf
from quantgate.tasks.judge.endpoint import JudgeEndpoint
from quantgate.tasks.judge.pairwise import JudgeSummary
from quantgate.tasks.judge.reliability import judge_identity
from quantgate.tasks.judge.replay import judge_replay


def _judge_key(context: Any, parameters: dict[str, Any]) -> str:
    return judge_identity(parameters["conf"])


# The endpoint (an actor's name, a port) changes from run to run and is not what a verdict depends
# on. The judge is: its model and its prompt are in the key, so a new judge or prompt re-judges.
JUDGE_CACHE = INPUTS - "endpoint" + TASK_SOURCE + CacheKeyFnPolicy(cache_key_fn=_judge_key)


@task(name="judge", task_run_name="judge-{variant}", tags=["judge"], cache_policy=JUDGE_CACHE,
      persist_result=True)
def judge_task(*, variant: str, baseline_samples: str, candidate_samples: str, conf: JudgeConf,
               endpoint: JudgeEndpoint) -> JudgeSummary:
    """Verdicts and transcript go to `judge/` beside the candidate's lm-eval samples."""
    return judge_replay(baseline_samples=baseline_samples, candidate_samples=candidate_samples, conf=conf,
                        judge=endpoint.client(conf), out_dir=str(Path(candidate_samples).parent / "judge"))
