"""Which format a checkpoint is in, decided in one place from its config.json.

- `dense`: an unquantized Hugging Face checkpoint (the baseline);
- `compressed-tensors`: what llm-compressor writes (FP8, INT4/INT2 group-wise, FP8 KV cache);
- `quip_sharp`, `aqlm`: our 2-bit codebook formats (`codebook_format.py`); AQLM with incoherence
  processing is written as quant_method `aqlm_rht` (stock transformers + aqlm must not read its
  rotated codes as plain ones) and is kind `aqlm` here.

Every loader (`load.py` for evaluation, `fast_cpu.py` and `gpu.py` for speed) branches on this and
nothing else."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Format = Literal["dense", "compressed-tensors", "quip_sharp", "aqlm"]
FORMATS: tuple[str, ...] = ("dense", "compressed-tensors", "quip_sharp", "aqlm")
VARIANTS_OF = {"aqlm_rht": "aqlm"}  # quant_method -> the kind that loads it


@dataclass(frozen=True)
class CheckpointFormat:
    kind: Format
    quantization_config: dict[str, Any] = field(default_factory=dict)


def checkpoint_format(path: str | Path) -> CheckpointFormat:
    """The format of the checkpoint folder `path`; a quant_method we cannot load is a ValueError."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(f"{path}: no config.json (not a checkpoint folder)")
    qc = json.loads(config_file.read_text()).get("quantization_config") or {}
    method = VARIANTS_OF.get(qc.get("quant_method"), qc.get("quant_method"))
    if method is None:
        return CheckpointFormat("dense")
    if method not in FORMATS:
        raise ValueError(f"{path}: quantization_config.quant_method {method!r} is not one of "
                         f"{', '.join(FORMATS[1:] + tuple(VARIANTS_OF))}")
    return CheckpointFormat(method, qc)
