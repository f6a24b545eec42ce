"""Calibration: per-Linear input activation statistics over the calibration set.

Writes `activation_stats.safetensors` (`<layer>.mean_abs`, `<layer>.max_abs`, [in_features])
and `calibration_summary.json` (tokens, top outlier channels per layer).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from quantgate.kernels import activation_stats
from quantgate.kernels.activation_stats import ChannelStats, drift_score, top_outliers
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.traffic import tokens as text
from quantgate.tasks.traffic.load import Request, read_requests
from quantgate.tasks.traffic.tokens import encode_request

STATS_FILE = "activation_stats.safetensors"
SUMMARY_FILE = "calibration_summary.json"


@dataclass(frozen=True)
class CalibrationResult:
    stats_path: str
    summary_path: str
    tokens: int


def calibration_code_digest() -> str:
    return source_digest(sys.modules[__name__], activation_stats, text, packages=("torch",))


def calibration_dir(state_dir: str | Path, *, calibration_hash: str, model_digest: str) -> str:
    """Content-addressed: same calibration set, model and code -> same folder."""
    name = f"{calibration_hash}-{model_digest[:12]}-{calibration_code_digest()}"
    return str(Path(state_dir) / "calibration" / name)


@torch.no_grad()
def collect_activation_stats(
    model: torch.nn.Module, sequences: list[list[int]]
) -> dict[str, ChannelStats]:
    stats: dict[str, ChannelStats] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            stats[name] = ChannelStats.empty(module.in_features)
            hooks.append(module.register_forward_pre_hook(
                lambda _m, args, s=stats[name]: s.update(args[0])
            ))
    try:
        for ids in sequences:  # one sequence at a time: no padding to mask out
            model(input_ids=torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    return stats


def calibrate(
    model_path: str, requests: list[Request], out_dir: Path, *, max_seq_len: int, top_k: int
) -> CalibrationResult:
    tokenizer = load_tokenizer(model_path)
    model = load_causal_lm(model_path)
    sequences = [encode_request(tokenizer, r).input_ids[:max_seq_len] for r in requests]
    stats = collect_activation_stats(model, sequences)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {}
    summary: dict[str, object] = {"sequences": len(sequences), "layers": {}}
    for name, s in stats.items():
        tensors[f"{name}.mean_abs"] = s.mean_abs.contiguous()
        tensors[f"{name}.max_abs"] = s.abs_max.contiguous()
        o = top_outliers(s.abs_max, top_k)
        summary["layers"][name] = {  # type: ignore[index]
            "outlier_channels": o.channels,
            "outlier_ratio_to_median": [round(r, 2) for r in o.ratio_to_median],
        }
    tokens = next(iter(stats.values())).tokens if stats else 0
    summary["tokens"] = tokens
    stats_path, summary_path = out_dir / STATS_FILE, out_dir / SUMMARY_FILE
    save_file(tensors, str(stats_path))
    summary_path.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return CalibrationResult(str(stats_path), str(summary_path), tokens)


def calibrate_file(
    model_path: str, calibration_path: str, out_dir: str, *, max_seq_len: int, top_k: int
) -> CalibrationResult:
    return calibrate(model_path, read_requests(Path(calibration_path)), Path(out_dir),
                     max_seq_len=max_seq_len, top_k=top_k)


def mean_abs_profiles(stats_path: str | Path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(stats_path))
    return {k.removesuffix(".mean_abs"): v for k, v in tensors.items() if k.endswith(".mean_abs")}


def calibration_drift(stats_a: str | Path, stats_b: str | Path) -> float:
    return drift_score(mean_abs_profiles(stats_a), mean_abs_profiles(stats_b))
