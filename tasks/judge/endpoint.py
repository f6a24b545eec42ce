"""Where the judge is, as something every Ray worker can reach.

With `judge.base_url` set, the judge is that external OpenAI-compatible endpoint. Otherwise the run
starts the packaged judge inside a Ray actor (`LocalJudge`): the actor reassembles the model on its
node, serves it on that node's loopback, and forwards each chat call to it. Judge tasks, wherever
they run in the cluster, reach the actor by name through Ray; nothing calls back into the driver and
the llama.cpp server never listens beyond 127.0.0.1. The actor and its server stop when the run's
`with` block ends, and with the Ray job if the driver dies.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quantgate.conf.schema import JudgeConf
from quantgate.tasks.judge.client import Chat, ChatEndpoint, JudgeCall
from quantgate.tasks.judge.server import JudgeProcess, packaged_judge_gguf
from quantgate.tasks.runtime.waiting import wait_ready


@dataclass(frozen=True)
class JudgeEndpoint:
    """An external URL, or the name of this run's judge actor; picklable, so tasks receive it."""

    base_url: str | None = None
    actor: str | None = None
    namespace: str | None = None

    def client(self, conf: JudgeConf) -> Chat:
        if self.base_url is not None:
            return ChatEndpoint(self.base_url, conf.model, api_key_env=conf.api_key_env,
                                timeout_s=conf.timeout_s, retries=conf.retries)
        assert self.actor is not None, "a JudgeEndpoint names a URL or an actor"
        return ActorChat(self.actor, self.namespace)


@dataclass(frozen=True)
class ActorChat:
    actor: str
    namespace: str | None

    def chat(self, messages: list[dict[str, str]], **kwargs: Any) -> JudgeCall:
        import ray

        try:
            handle = ray.get_actor(self.actor, namespace=self.namespace)
            return ray.get(handle.chat.remote(messages, **kwargs))
        except (ray.exceptions.RayError, ValueError) as exc:  # actor gone or never started
            return JudgeCall(None, None, f"judge actor {self.actor}: {type(exc).__name__}")


class LocalJudge:
    """The packaged judge on this node's loopback; wrapped once with ray.remote by `judge_endpoint`."""

    def __init__(self, cache_dir: str, log_path: str, conf: JudgeConf) -> None:
        gguf = packaged_judge_gguf(Path(cache_dir))
        self._server = JudgeProcess.start(gguf, log_path=Path(log_path), threads=conf.threads)
        # The local server needs no key; the retry and timeout policy is the configured one.
        self._client = ChatEndpoint(self._server.base_url, "judge", api_key_env=None,
                                    timeout_s=conf.timeout_s, retries=conf.retries)

    def ready(self) -> str:
        return self._server.base_url

    def chat(self, messages: list[dict[str, str]], **kwargs: Any) -> JudgeCall:
        return self._client.chat(messages, **kwargs)

    def stop(self) -> None:
        self._server.stop()


@contextlib.contextmanager
def judge_endpoint(conf: JudgeConf, state_dir: str) -> Iterator[JudgeEndpoint]:
    """The configured external judge, or the packaged one in an actor for the `with` block. Raises
    (JudgeServerError, or the actor's error) when the local judge cannot start."""
    if conf.base_url is not None:
        yield JudgeEndpoint(base_url=conf.base_url)
        return
    import ray

    name = f"quantgate-judge-{uuid.uuid4().hex[:8]}"
    # num_cpus=0: the server's threads run beside the judge tasks, which only wait on it.
    actor = ray.remote(LocalJudge).options(name=name, num_cpus=0).remote(
        str(Path(state_dir) / "models"), str(Path(state_dir) / "judge-server.log"), conf)
    try:
        ready = actor.ready.remote()
        wait_ready(ready)  # the server takes seconds to start: a stop must not wait for it
        ray.get(ready)
        yield JudgeEndpoint(actor=name, namespace=ray.get_runtime_context().namespace)
    except BaseException:
        # A failure or a stop does not wait behind a judgment in flight: the actor is killed at once,
        # and its server dies with the actor's process (PDEATHSIG).
        ray.kill(actor)
        raise
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(actor.stop.remote(), timeout=15)
    ray.kill(actor)
