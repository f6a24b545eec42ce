"""The judge over a run's replay: each variant's answers against the baseline's, same prompts."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from quantgate.conf.schema import JudgeConf
from quantgate.tasks.evaluate.lmeval import spread
from quantgate.tasks.judge.client import Chat
from quantgate.tasks.judge.pairwise import JudgeSummary, Pair, judge_pairs

REPLAY_TASK = "qg_replay"


def replay_answers(samples_path: str) -> dict[str, tuple[str, str]]:
    """id -> (prompt, reply) of the replay task in an lm-eval samples file."""
    out = {}
    with open(samples_path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["task"] == REPLAY_TASK and row["reply"] is not None:
                out[row["id"]] = (row.get("prompt") or "", row["reply"])
    return out


def replay_pairs(baseline_samples: str, candidate_samples: str, max_pairs: int) -> list[Pair]:
    base, cand = replay_answers(baseline_samples), replay_answers(candidate_samples)
    common = [i for i in base if i in cand]
    ids = [common[k] for k in spread(len(common), max_pairs)]  # every stratum, not the head
    return [Pair(i, base[i][0], cand[i][1], base[i][1]) for i in ids]


def judge_replay(*, baseline_samples: str, candidate_samples: str, conf: JudgeConf, judge: Chat,
                 out_dir: str) -> JudgeSummary:
    out = Path(out_dir)
    pairs = replay_pairs(baseline_samples, candidate_samples, conf.max_pairs)
    if not pairs:
        raise ValueError(f"no replay answers to judge in {candidate_samples} (is {REPLAY_TASK} "
                         "in lmeval.tasks?)")
    summary, _ = judge_pairs(judge, pairs, mode=conf.mode,
                             tie_band=conf.tie_band, transcript_path=out / "judge_transcript.jsonl")
    (out / "judge_summary.json").write_text(json.dumps(asdict(summary), indent=1))
    return summary
