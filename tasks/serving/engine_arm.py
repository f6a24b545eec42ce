"""One arm of the canary (`champion` or `canary`): a Ray Serve deployment that owns a vLLM engine
server for one MLflow model version and forwards the router's requests to it over loopback HTTP.

What serves is the engine, batching requests as in production; this class only starts and stops it
(on cores of its own, `tasks/engine`), streams its answers back through Ray Serve, and reports its
health: an engine that dies fails Ray Serve's health check, so the replica is replaced and, meanwhile,
every request to it fails fast (a failed window, rolled back; never a hang). The engine listens on
the replica's own loopback, so router and arms may sit on different nodes of a cluster.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from ray import serve

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.checkpoints import engine_spec
from quantgate.tasks.engine.environment import find_engine
from quantgate.tasks.engine.server import engine_server
from quantgate.tasks.model.load import load_tokenizer
from quantgate.tasks.perf.energy import process_tree_cpu_s
from quantgate.tasks.serving import engine_client
from quantgate.tasks.serving.protocol import Prompt, prompt_token_ids


@serve.deployment(max_ongoing_requests=64, health_check_period_s=5, health_check_timeout_s=30,
                  graceful_shutdown_timeout_s=10)
class EngineArm:
    def __init__(self, role: str, model_uri: str, version: str, path: str, engine: dict[str, Any],
                 state_dir: str) -> None:
        self.role, self.model_uri, self.version, self.path = role, model_uri, version, path
        self._stack = contextlib.ExitStack()
        conf = EngineConf.model_validate(engine)
        spec = engine_spec(path, role, conf)  # its dtype by the CPU, its KV cache as the checkpoint says
        self.server = self._stack.enter_context(engine_server(
            spec, state_dir=Path(state_dir), log_name=f"{role}-v{version}",
            python=find_engine(conf.python).python, timeout_s=conf.start_timeout_s))
        self.client = httpx.AsyncClient(base_url=self.server.base_url,
                                        timeout=httpx.Timeout(120, connect=5))
        self.tok = load_tokenizer(path)  # the likelihood judge's token ids (`score`)
        self.in_flight = 0

    def check_health(self) -> None:
        """Ray Serve calls this every few seconds; raising replaces the replica."""
        if not self.server.alive():
            raise RuntimeError(f"the {self.role} engine exited: {self.server.reason()}")
        if not self.server.healthy():
            raise RuntimeError(f"the {self.role} engine does not answer /health")

    def __del__(self) -> None:
        self._stack.close()

    def info(self) -> dict[str, Any]:
        return {"role": self.role, "model_uri": self.model_uri, "version": self.version, "path": self.path,
                "engine": self.server.base_url, "startup_s": self.server.startup_s,
                "cpus": list(self.server.cpus), "dtype": self.server.spec.dtype, "pid": os.getpid(),
                "engine_pid": self.server.server_pid()}

    def metrics_text(self) -> str:
        """The engine's Prometheus exposition (parsed by `tasks.engine.metrics.parse_metrics`)."""
        return httpx.get(f"{self.server.base_url}/metrics", timeout=10).text

    async def stream(self, prompt: Prompt) -> AsyncIterator[dict[str, Any]]:
        """{"delta": text} per chunk, then {"done": stats}. `cpu_s`: the engine's CPU seconds during
        the request shared among the requests in flight (an estimate: a batch's cost is not
        separable by request)."""
        cpu0, self.in_flight = process_tree_cpu_s(self.server.process.pid), self.in_flight + 1
        peak = self.in_flight
        try:
            async for item in engine_client.stream(self.client, prompt, self.role):
                peak = max(peak, self.in_flight)
                if "done" in item:
                    share = (process_tree_cpu_s(self.server.process.pid) - cpu0) / max(1, peak)
                    item = {"done": item["done"] | {"cpu_s": share}}
                yield item
        finally:
            self.in_flight -= 1

    async def generate(self, prompt: Prompt) -> dict[str, Any]:
        parts, done = [], {}
        async for item in self.stream(prompt):
            if "delta" in item:
                parts.append(item["delta"])
            else:
                done = item["done"]
        return {"text": "".join(parts), **done}

    async def score(self, prompt: Prompt, answers: list[str]) -> list[float | None]:
        """Each answer's mean NLL per token under this arm's model (the likelihood judge's view)."""
        prompt_ids = prompt_token_ids(self.tok, prompt)
        out = []
        for answer in answers:
            ids = self.tok(answer, add_special_tokens=False)["input_ids"]
            out.append(await engine_client.answer_nll(self.client, self.role, prompt_ids, list(ids)))
        return out
