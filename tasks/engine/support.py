"""What the serving engine, on this machine, refused to serve: learned once per quantization format.

vLLM's CPU builds refuse some formats only after a whole start-up (30-60 s on 2 cores): W4A16 fails
at the first forward on the AVX2 build (no `cpu_gemm_wna16`), an FP8 KV cache is refused at load
without AVX-512, FP8 W8A8 runs on a fallback kernel. A second checkpoint in the same format, on the
same engine build, device, CPU and model shapes, is not given another start-up: the first refusal
is remembered with the engine's words and the log they came from.

Each refusal is also kept under its variant spec's format (`plan_key`: kernel family, bits, group size,
symmetry, KV-cache bits, with the same engine, machine and model shapes), so that the next run's
planner skips a variant in a refused format before quantizing it, with the engine's words.

The answer depends on the machine and the engine, not on a run, so the memory is machine-wide: one
JSON file under the user's cache (`$XDG_CACHE_HOME/quantgate`, else `~/.cache/quantgate`). Only
refusals about the format are kept, never a taken port, a lack of memory or a start-up timeout
(`EngineStartError.transient`), and never a dense checkpoint's (that is a broken engine, not a
format). Deleting the file forgets everything; a new engine version or CPU starts afresh anyway.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from quantgate.tasks.engine.environment import cpu_flags
from quantgate.tasks.model.formats import checkpoint_format

# The scheme fields a kernel is chosen by (not observers, not GPTQ's activation order, not `ignore`).
_SCHEME_KEYS = ("num_bits", "type", "strategy", "group_size", "symmetric", "dynamic", "block_structure")
_SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads",
               "num_key_value_heads", "head_dim")
_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")


def support_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "quantgate" / "engine-support.json"


def format_signature(checkpoint: str) -> dict[str, Any]:
    """The checkpoint's quantization format as kernels see it; {} for a dense checkpoint."""
    fmt = checkpoint_format(checkpoint)
    qc = fmt.quantization_config
    if fmt.kind == "dense":
        return {}

    def scheme(s: dict | None) -> dict | None:
        return None if not s else {k: s.get(k) for k in _SCHEME_KEYS}

    groups = sorted(json.dumps({"format": g.get("format"), "weights": scheme(g.get("weights")),
                                 "input_activations": scheme(g.get("input_activations"))}, sort_keys=True)
                     for g in (qc.get("config_groups") or {}).values())
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    return {"kind": fmt.kind, "format": qc.get("format"), "groups": groups,
            "kv_cache": scheme(qc.get("kv_cache_scheme")),
            "shapes": {k: config.get(k) for k in _SHAPE_KEYS}}


def support_key(checkpoint: str, engine_version: str, device: str, dtype: str) -> str | None:
    """The memory's key for this checkpoint's format on this engine and machine (None: dense)."""
    signature = format_signature(checkpoint)
    if not signature:
        return None
    isa = sorted(cpu_flags() & set(_ISA)) if device == "cpu" else []
    text = json.dumps([engine_version, device, dtype, isa, signature], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_key(spec: Any, model_path: str, engine_version: str, device: str, dtype: str) -> str | None:
    """The memory's key for a variant spec's format before it is quantized (None: the engine does not
    load the format at all, or it is dense). Two methods that write one format share it (int4_rtn and
    int4_gptq at one group size): the engine refuses formats, not methods."""
    if not type(spec).engine_serves or spec.method == "baseline_bf16":
        return None
    fmt = {"kernel": spec.kernel, "bits": getattr(spec, "num_bits", None), "kv_bits": spec.kv_bits,
           "compute": spec.native_compute, "group_size": getattr(spec, "group_size", None),
           "symmetric": getattr(spec, "symmetric", None)}
    config = json.loads((Path(model_path) / "config.json").read_text())
    isa = sorted(cpu_flags() & set(_ISA)) if device == "cpu" else []
    text = json.dumps(["plan", engine_version, device, dtype, isa, fmt,
                       {k: config.get(k) for k in _SHAPE_KEYS}], sort_keys=True)
    return "plan-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def refused(key: str | None) -> dict[str, str] | None:
    """The remembered refusal for `key` ({"reason", "log", "checkpoint"}), or None."""
    if key is None:
        return None
    entry = _read(support_file()).get(key)
    return entry if entry and "reason" in entry else None


def served_before(key: str | None) -> bool:
    """Whether the engine served this format here before (a probe's start-up, `probe.py`)."""
    return key is not None and "served" in _read(support_file()).get(key, {})


def remember_served(key: str | None, *, checkpoint: str) -> None:
    """Keep that the engine served this format here (asked once, not at every run)."""
    if key is not None:
        _update({key: {"served": checkpoint}})


def remember(key: str | None, *, reason: str, log: str, checkpoint: str, spec_key: str | None = None) -> None:
    """Keep a refusal about the format (the caller has checked it was not transient), under the
    checkpoint's format and, where known, its variant spec's (`plan_key`)."""
    if key is None:
        return
    entry = {"reason": reason, "log": log, "checkpoint": checkpoint}
    _update({k: entry for k in filter(None, (key, spec_key))})


def _update(entries: dict[str, dict[str, str]]) -> None:
    path = support_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:  # two evaluations learning at once: both kept
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = _read(path) | entries
        tmp = path.with_suffix(f".{os.getpid()}.partial")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(path)


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # absent, or not ours to trust: nothing remembered
        return {}
    return data if isinstance(data, dict) else {}
