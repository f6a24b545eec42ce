"""The model deployment: one checkpoint, loaded from an MLflow model version, generating on CPU.

The same class serves `champion` and `canary` (`ModelReplica.options(name=...)`). Its `user_config`
holds the drill faults, so `--inject` reconfigures a running canary in place and a replica the
controller restarts comes back with them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from ray import serve

from quantgate.tasks.serving.generation import Faults, Generation, Generator
from quantgate.tasks.serving.protocol import Prompt


def stats(gen: Generation, start: float) -> dict[str, Any]:
    """Service time (`total_s`, TTFT, TPOT) from when the request got the replica: queueing depends on
    the weight by design (at 5 % the canary idles, at 100 % it queues), its speed does not.
    `queue_s`: the wait before it."""
    end = time.perf_counter()
    began = gen.started_at or start
    ttft = (gen.first_token_at - began) if gen.first_token_at else None
    tpot = ((end - gen.first_token_at) / (gen.completion_tokens - 1)
            if gen.first_token_at and gen.completion_tokens > 1 else None)
    # CPU seconds of this replica's process while it served the request (all its threads; requests
    # never overlap, the generator's lock): the rollout's estimated J/token reads them.
    cpu_s = time.process_time() - gen.cpu_started_at if gen.cpu_started_at is not None else None
    return {"finish": gen.finish, "prompt_tokens": gen.prompt_tokens, "cpu_s": cpu_s,
            "completion_tokens": gen.completion_tokens, "ttft_s": ttft, "tpot_s": tpot,
            "total_s": end - began, "queue_s": began - start}


@serve.deployment(max_ongoing_requests=8, health_check_period_s=5, health_check_timeout_s=60,
                  graceful_shutdown_timeout_s=5)
class ModelReplica:
    def __init__(self, role: str, model_uri: str, version: str, path: str, threads: int, dtype: str) -> None:
        self.role, self.model_uri, self.version = role, model_uri, version
        self.gen = Generator(path, threads=threads, dtype=dtype)

    def reconfigure(self, config: dict[str, Any]) -> None:
        self.gen.faults = Faults(**config.get("faults", {}))

    def info(self) -> dict[str, Any]:
        return {"role": self.role, "model_uri": self.model_uri, "version": self.version,
                "path": self.gen.path_desc, "faults": vars(self.gen.faults), "pid": os.getpid()}

    def generate(self, prompt: Prompt) -> dict[str, Any]:
        start, out = time.perf_counter(), Generation()
        text = "".join(t.text for t in self.gen.stream(prompt, out))
        return {"text": text, **stats(out, start)}

    def score(self, prompt: Prompt, answers: list[str]) -> list[float | None]:
        """Each answer's mean NLL per token under this replica's model (no faults: a judge's view);
        one call per pair, so Ray Serve's request counter reads calls = answers + pairs scored."""
        return [None if (s := self.gen.score(prompt, a)) is None else s[0] for a in answers]

    def stream(self, prompt: Prompt) -> Iterator[dict[str, Any]]:
        """{"delta": text} per token, then {"done": stats}."""
        start, out = time.perf_counter(), Generation()
        for token in self.gen.stream(prompt, out):
            if token.text:
                yield {"delta": token.text}
        yield {"done": stats(out, start)}
