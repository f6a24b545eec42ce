"""One engine server kept up across a checkpoint's evaluations in a row.

A variant's perplexity looks and its task evals read the same checkpoint on the same engine: each
starting a server of its own paid a start-up (~30 s of one core on CPU, two Python processes
importing torch and vLLM) per stage, and made a second perplexity look cost more than the requests
it would save. A session starts the server when the first evaluation needs it (none when every
result is on disk already) and stops it when the session closes. A start-up that failed fails every
later use with the same error: never a second start-up for the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import TracebackType

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.refusals import served_checkpoint
from quantgate.tasks.engine.server import EngineServer, EngineSpec, EngineStartError


class EngineSession:
    """A lazily started server of one checkpoint, for a `with` block."""

    def __init__(self, engine: EngineConf, state_dir: str, *, log_name: str) -> None:
        self.engine, self.state_dir, self.log_name = engine, state_dir, log_name
        self._stack = ExitStack()
        self._server: EngineServer | None = None
        self._failed: EngineStartError | None = None

    def server(self, spec: EngineSpec) -> tuple[EngineServer, bool]:
        """The server of `spec` and whether this call started it (its start-up is this call's)."""
        if self._failed is not None:
            raise self._failed
        if self._server is not None:
            if self._server.spec != spec:
                raise ValueError(f"this session serves {self._server.spec.model}, not {spec.model}")
            return self._server, False
        try:
            self._server = self._stack.enter_context(
                served_checkpoint(spec, self.engine, self.state_dir, log_name=self.log_name))
        except EngineStartError as exc:
            self._failed = exc
            raise
        return self._server, True

    def __enter__(self) -> EngineSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stack.close()


@contextmanager
def session_server(session: EngineSession | None, spec: EngineSpec, engine: EngineConf, state_dir: str,
                   *, log_name: str) -> Iterator[tuple[EngineServer, float]]:
    """The session's server (kept up after the block), or one for this block alone (no session);
    with the start-up seconds this block paid: 0 on a server that was up already."""
    if session is not None:
        server, started = session.server(spec)
        yield server, server.startup_s if started else 0.0
        return
    with served_checkpoint(spec, engine, state_dir, log_name=log_name) as server:
        yield server, server.startup_s
