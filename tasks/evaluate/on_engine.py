"""Perplexity by slice, and KL from the baseline, scored by the engine that serves the checkpoint.

The engine's counterpart of `perplexity.evaluate_checkpoint`: the same requests, windows, looks and
result file, computed from an engine server's prompt logprobs (`served.py`). The server starts for
this evaluation on its own cores and stops after it; its start-up is reported apart from the scoring
time. A checkpoint no production engine serves is refused here with the reason (`servable`), and the
caller scores it on the reference path, labelled so.
"""

from __future__ import annotations

import time
from pathlib import Path

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.environment import find_engine, serving_dtype
from quantgate.tasks.engine.server import EngineSpec, engine_server
from quantgate.tasks.evaluate.perplexity import EvalResult, RequestNll, finish_result, look_requests
from quantgate.tasks.evaluate.served import load_record, save_record, score_served, windows_for
from quantgate.tasks.model.formats import checkpoint_format
from quantgate.tasks.model.load import load_tokenizer
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.slices import slice_names
from quantgate.tasks.traffic.tokens import encode_request

NO_ENGINE = {"quip_sharp": "QuIP#", "aqlm": "AQLM"}


def servable(checkpoint: str, engine: str = "vllm") -> str:
    """Why `engine` cannot serve this checkpoint ("" when it can load it)."""
    kind = checkpoint_format(checkpoint).kind
    if kind in NO_ENGINE:
        return (f"not servable on {engine}: no production engine serves {NO_ENGINE[kind]} (vLLM removed "
                "AQLM in 2025 and never had QuIP#)")
    return ""


def kv_cache_dtype(checkpoint: str) -> str:
    """fp8 where the checkpoint carries an FP8 KV-cache scheme (llm-compressor's kv_cache_scheme)."""
    qc = checkpoint_format(checkpoint).quantization_config
    scheme = qc.get("kv_cache_scheme") or {}
    return "fp8" if scheme.get("type") == "float" and scheme.get("num_bits") == 8 else "auto"


def engine_spec(checkpoint: str, name: str, conf: EngineConf, *, device: str = "cpu") -> EngineSpec:
    return EngineSpec(model=checkpoint, served_name=name, dtype=serving_dtype(conf.dtype, device),
                      threads=conf.threads, kv_cache_gb=conf.kv_cache_gb, max_model_len=conf.max_model_len,
                      max_num_seqs=conf.max_num_seqs, max_logprobs=conf.max_logprobs,
                      kv_cache_dtype=kv_cache_dtype(checkpoint), enforce_eager=conf.enforce_eager,
                      device=device)


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
    if window > engine.max_model_len:
        raise ValueError(f"eval.window={window} exceeds engine.max_model_len={engine.max_model_len}")
    spec = engine_spec(checkpoint, name, engine)
    with engine_server(spec, state_dir=Path(state_dir), log_name=f"eval-{name}",
                       python=find_engine(engine.python).python, timeout_s=engine.start_timeout_s) as server:
        scored_from = time.perf_counter()
        scores = score_served(server.base_url, name, items, requests=len(requests), positions=positions,
                              k=engine.max_logprobs, concurrency=engine.concurrency, only=set(picked),
                              reference=load_record(reference) if reference else None)
        print(f"      {name}: engine up in {server.startup_s:.0f} s, scored {len(picked)} requests in "
              f"{time.perf_counter() - scored_from:.0f} s", flush=True)
    per_request = tuple(RequestNll(requests[i].id, *scores.per_request[i],
                                   tuple(slice_names(requests[i].slices)), scores.kl[i]) for i in picked)
    reference_path = None
    if record_reference:
        reference_path = str(Path(out_path).with_suffix(".topk.npz"))
        save_record(reference_path, scores.record_idx, scores.record_logp)
    kv_layers = spec.kv_cache_dtype == "fp8" and _layers(checkpoint)
    return finish_result(requests, per_request, out_path, start=start, cpu=cpu, first=first, look=look,
                         kv_cache_quantized_layers=int(kv_layers or 0), reference_path=reference_path,
                         scored_by=f"{find_engine(engine.python).version}, {spec.dtype}")


def _layers(checkpoint: str) -> int:
    import json

    return int(json.loads((Path(checkpoint) / "config.json").read_text()).get("num_hidden_layers", 0))
