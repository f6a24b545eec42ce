"""One analysis window: replay held-out traffic at the step's weight, wait for the mirrored requests,
then measure every metric on what the router recorded.

The router's request log is the window's record (it sees routed and mirrored requests alike, with
the replica's own service times); the replayer's count says what was sent, so a request the log
lacks is counted as lost, never ignored.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from quantgate.conf.rollout import RolloutConf
from quantgate.tasks.rollout import analysis
from quantgate.tasks.rollout.analysis import Measurement
from quantgate.tasks.rollout.pair_judge import PairJudge
from quantgate.tasks.serving.replayer import ReplayResult, replay


@dataclass(frozen=True)
class WindowResult:
    sent: int
    statuses: dict[str, int]
    wall_s: float
    started_at: float
    measurements: list[Measurement]

    def to_dict(self) -> dict[str, Any]:
        return {"sent": self.sent, "statuses": self.statuses, "wall_s": self.wall_s,
                "started_at": self.started_at, "measurements": [m.to_dict() for m in self.measurements]}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written right now: read next time
    return out


def _wait_for_mirrors(base_url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/quantgate/routing", timeout=5).json().get("mirrors_in_flight", 0) == 0:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def _judge_new_pairs(log_dir: Path, since: float, judge: PairJudge) -> list[str]:
    """Judge this window's mirrored pairs (at most judge.per_step); every outcome so far."""
    done_path = log_dir / "judged.jsonl"
    done = {r["id"]: r["outcome"] for r in read_jsonl(done_path)}
    new = [r for r in read_jsonl(log_dir / "mirror.jsonl") if r["t"] >= since and r["id"] not in done]
    judged = judge.judge(new[: judge.per_step])
    with done_path.open("a", encoding="utf-8") as f:
        for j in judged:
            f.write(json.dumps(j) + "\n")
            done[j["id"]] = j["outcome"]
    return list(done.values())


def _canary_answers(folder: Path, since: float) -> int:
    return sum(1 for r in read_jsonl(folder / "requests.jsonl") if r["t"] >= since and r["arm"] == "canary")


def _joules(j: float) -> str:
    return f"{j:.3f} J/token"


def reference_pools(records: list[dict[str, Any]], started: float, resumed_at: float
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Where the rank tests look for the champion's times when the window has too few, nearest
    first: the records since this process started or resumed the rollout, then all earlier ones."""
    earlier = [r for r in records if r["t"] < started]
    return [r for r in earlier if r["t"] >= resumed_at], earlier


def run_window(*, base_url: str, model_name: str, prompts: list[list[dict[str, str]]], weight: float,
               step_index: int, conf: RolloutConf, log_dir: str, judge: PairJudge | None,
               api_key: str | None = None, watts_per_busy_core: float | None = None,
               resumed_at: float = 0.0) -> WindowResult:
    """One analysis window at `weight`. `resumed_at`: when this process started or resumed the
    rollout; earlier records were served under the settings of the run it resumed."""
    folder, a = Path(log_dir), conf.analysis
    started = time.time()
    sent = ReplayResult()
    # Rounds until the canary has answered enough (routed and shadowed): routing is random, so one
    # round often leaves the canary a sample too small to test. Bounded in count and time.
    share = weight + (1 - weight) * conf.shadow_share
    while True:
        canary = _canary_answers(folder, started)
        room = conf.window_max_requests - len(sent.sent)
        left_s = conf.window_max_s - (time.time() - started)
        if canary >= conf.window_canary_requests or room <= 0 or left_s <= 0:
            break
        n = min(room, math.ceil((conf.window_canary_requests - canary) / max(share, 1e-9)))
        more = replay(base_url, prompts[len(sent.sent) % len(prompts):] + prompts, model=model_name,
                      rate_per_s=conf.replay_rate_per_s, concurrency=conf.replay_concurrency,
                      max_requests=n, max_s=left_s, max_tokens=conf.replay_max_tokens, api_key=api_key)
        sent.sent += more.sent
        _wait_for_mirrors(base_url)  # the shadowed answers are in the log before they are counted
    sent.wall_s = time.time() - started
    _wait_for_mirrors(base_url)
    records = read_jsonl(folder / "requests.jsonl")
    window = [r for r in records if r["t"] >= started]
    nearest = reference_pools(records, started, resumed_at)
    alpha_look = a.alpha / len(conf.steps)
    measurements = [
        analysis.error_rate(records, a),
        analysis.rank_test("latency", "total_s", window, nearest, a.latency_tolerance, alpha_look,
                           a.min_latency_samples),
        analysis.rank_test("tpot", "tpot_s", window, nearest, a.tpot_tolerance, alpha_look,
                           a.min_latency_samples),
    ]
    if watts_per_busy_core:
        for r in records:  # estimated: CPU seconds x the profile's stated power, per generated token
            if r.get("cpu_s") is not None and r.get("completion_tokens"):
                r["j_per_token"] = r["cpu_s"] * watts_per_busy_core / r["completion_tokens"]
        measurements.append(analysis.rank_test("energy", "j_per_token", window, nearest, a.energy_tolerance,
                                               alpha_look, a.min_latency_samples, show=_joules))
    if judge is not None:
        try:
            outcomes = _judge_new_pairs(folder, started, judge)
            measurements.append(analysis.judge_pairs(outcomes, a))
        except Exception as exc:  # the judge down is an error measurement, not a crash of the rollout
            measurements.append(Measurement("judge", "error", f"{type(exc).__name__}: {str(exc)[:300]}"))
    lost = len(sent.sent) - sum(1 for r in window if not r.get("mirror"))
    statuses = sent.statuses | ({"unrecorded": lost} if lost > 0 else {})
    return WindowResult(len(sent.sent), statuses, sent.wall_s, started, measurements)
