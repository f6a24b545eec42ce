r"""Who should judge a rollout's mirrored pairs on this machine (not a test): the champion's likelihood
against the packaged LLM judge, on pairs a rollout logged (`<state>/rollouts/<model>/<id>/mirror.jsonl`).

    .venv/bin/python bench/rollout_judges.py --state .quantgate --champion <checkpoint> \
        --pairs garbage=<drill's mirror.jsonl> --pairs fp8=<demo's mirror.jsonl> \
        [--llm-mode prob] [--limit 10]

Per pair: the likelihood margin (canary's mean NLL per token minus the champion's own answer's, under
the champion's model, nats per token) with its outcome at the default tie band, and, with
`--llm-mode`, the LLM judge's outcome and the seconds it took. Prints one line per pair and a tally.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from quantgate.tasks.runtime.servers import configure_process_env

configure_process_env(Path(".quantgate"), offline=True)  # loopback, telemetry off: before Ray's import

from quantgate.conf.load import load_config  # noqa: E402
from quantgate.conf.rollout import AnalysisConf  # noqa: E402
from quantgate.tasks.rollout.pair_judge import LikelihoodJudge, LlmJudge  # noqa: E402
from quantgate.tasks.serving.generation import Generator  # noqa: E402
from quantgate.tasks.serving.protocol import Prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state", type=Path, default=Path(".quantgate"), help="where the judge model is cached")
    ap.add_argument("--champion", required=True, help="the champion's checkpoint directory")
    ap.add_argument("--pairs", action="append", required=True, help="LABEL=path/to/mirror.jsonl")
    ap.add_argument("--llm-mode", choices=["text", "prob", "rubric", "reference"], default=None)
    ap.add_argument("--limit", type=int, default=12, help="pairs per file")
    args = ap.parse_args()

    champion = Generator(args.champion, threads=2)
    likelihood = LikelihoodJudge(AnalysisConf().likelihood_tie_band)
    sets = {}
    for spec in args.pairs:
        label, _, path = spec.partition("=")
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()][: args.limit]
        for r in rows:  # scored again here: logs written before the router scored pairs have no scores
            prompt = Prompt("chat", [{"role": "user", "content": r["request"]}], None, 1, 0.0, 1.0, [], None)
            r["canary_nll"], r["champion_nll"] = (None if (s := champion.score(prompt, a)) is None else s[0]
                                                  for a in (r["canary"], r["champion"]))
        sets[label] = rows
    tally: Counter = Counter()
    llm = _llm_judge(args) if args.llm_mode else None
    for label, rows in sets.items():
        for r, lk in zip(rows, likelihood.judge(rows), strict=True):
            margin = lk["margin_nats"] or 0.0
            line = f"{label:10s} likelihood {lk['outcome']:9s} margin {margin:+6.2f} nats/token"
            tally[(label, "likelihood", lk["outcome"])] += 1
            if llm is not None:
                t = time.perf_counter()
                (got,) = llm.judge([r])
                line += f" | {args.llm_mode} {got['outcome']:9s} {time.perf_counter() - t:5.1f} s"
                tally[(label, args.llm_mode, got["outcome"])] += 1
            print(line, flush=True)
    for (label, judge, outcome), n in sorted(tally.items()):
        print(f"{label}: {judge} {outcome} {n}")


def _llm_judge(args: argparse.Namespace) -> LlmJudge:
    import contextlib

    import ray

    from quantgate.tasks.judge.endpoint import judge_endpoint

    conf = load_config().judge
    ray.init(num_cpus=2, include_dashboard=False)
    stack = contextlib.ExitStack()  # the judge server stops when the process ends
    endpoint = stack.enter_context(judge_endpoint(conf, str(args.state.resolve())))
    return LlmJudge(endpoint.client(conf), args.llm_mode, conf.tie_band, per_step=None)


if __name__ == "__main__":
    main()
