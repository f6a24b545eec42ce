"""Perplexity by slice, and KL from the baseline, scored by the engine that serves the checkpoint.

The engine's counterpart of `perplexity.evaluate_checkpoint`: the same requests, windows, looks and
result file, computed from an engine server's prompt logprobs (`served.py`). The server starts for
this evaluation on its own cores and stops after it, or is the `session`'s (`engine/session.py`: one
server across a variant's looks and task evals); a start-up is reported apart from the scoring
time. A checkpoint no production engine serves is refused here with the reason
(`engine.checkpoints.servable`), and the caller scores it on the reference path, labelled so.
"""

from __future__ import annotations

import time
from pathlib import Path

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.checkpoints import engine_spec, servable
from quantgate.tasks.engine.environment import find_engine, serving_dtype
from quantgate.tasks.engine.refusals import scored_by
from quantgate.tasks.engine.session import EngineSession, session_server
from quantgate.tasks.evaluate.divergence import save_topk
from quantgate.tasks.evaluate.lmeval import LmEvalResult, ServedModel, run_lmeval
from quantgate.tasks.evaluate.perplexity import EvalResult, RequestNll, finish_result, look_requests
from quantgate.tasks.evaluate.served import load_record, score_served, windows_for
from quantgate.tasks.model.load import load_tokenizer
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.slices import slice_names
from quantgate.tasks.traffic.tokens import encode_request


def evaluate_on_engine(checkpoint: str, heldout_path: str, out_path: str, *, engine: EngineConf,
                       state_dir: str, window: int, name: str = "model", reference: str | None = None,
                       record_reference: bool = False, look: str = "all", first_share: float = 1.0,
                       first: EvalResult | None = None, session: EngineSession | None = None) -> EvalResult:
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
    with session_server(session, spec, engine, state_dir, log_name=f"eval-{name}") as (server, startup_s):
        scores = score_served(server.base_url, name, items, requests=len(requests), positions=positions,
                              k=engine.max_logprobs, concurrency=engine.concurrency, only=set(picked),
                              reference=load_record(reference) if reference else None)
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


def lmeval_on_engine(checkpoint: str, out_dir: str, *, name: str, engine: EngineConf, state_dir: str,
                     tasks: list[str], replay_path: str, replay_size: int, limit: int | None,
                     session: EngineSession | None = None) -> LmEvalResult:
    """The lm-eval suite through a server of `checkpoint` (lm-eval's completions model, requests as
    token ids with the chat template applied on our side: `lmeval._engine_model`)."""
    spec = engine_spec(checkpoint, name, engine)
    with session_server(session, spec, engine, state_dir, log_name=f"lmeval-{name}") as (server, _):
        served = ServedModel(server.base_url, name, spec.max_model_len, engine.concurrency,
                             scored_by(engine, spec))
        return run_lmeval(checkpoint, out_dir, tasks=tasks, replay_path=replay_path, replay_size=replay_size,
                          batch_size=1, dtype=spec.dtype, limit=limit, backend="engine", served=served)


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
