"""Which checkpoints the engine serves, and the server spec for one: its dtype by the hardware, its
KV cache in FP8 where the checkpoint carries an FP8 KV-cache scheme, the rest from `engine` conf."""

from __future__ import annotations

import json
from pathlib import Path

from quantgate.conf.engine import EngineConf
from quantgate.tasks.engine.environment import serving_dtype
from quantgate.tasks.engine.server import EngineSpec
from quantgate.tasks.model.formats import checkpoint_format

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


def model_context(checkpoint: str) -> int | None:
    """The longest context the checkpoint's position encoding covers (None: its config does not say)."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    value = config.get("max_position_embeddings") or (config.get("text_config") or {}).get(
        "max_position_embeddings")
    return int(value) if value else None


def engine_spec(checkpoint: str, name: str, conf: EngineConf) -> EngineSpec:
    """`engine.max_model_len`, capped at what the model covers (vLLM refuses to go beyond it)."""
    device = conf.device
    context = min(conf.max_model_len, model_context(checkpoint) or conf.max_model_len)
    return EngineSpec(model=checkpoint, served_name=name, dtype=serving_dtype(conf.dtype, device),
                      threads=conf.threads, kv_cache_gb=conf.kv_cache_gb, max_model_len=context,
                      max_num_seqs=conf.max_num_seqs, max_logprobs=conf.max_logprobs,
                      kv_cache_dtype=kv_cache_dtype(checkpoint), enforce_eager=conf.enforce_eager,
                      device=device)
