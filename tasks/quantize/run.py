"""Run one variant's quantization and save a checkpoint that `load_causal_lm` reloads:
llm-compressor recipes give compressed-tensors checkpoints; our own codebook methods
(QuIP#, AQLM) give the formats of `model.codebook_format`. The output folder is content-addressed
(`variant_dir`) and written atomically; a finished one (`DONE`) is reused."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from quantgate.conf.methods import VariantSpec
from quantgate.kernels.ldlq import HessianNotPositiveDefinite
from quantgate.tasks.model import codebook_format
from quantgate.tasks.model.codebook_format import save_codebook_checkpoint, target_linears
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.quantize import wna16
from quantgate.tasks.quantize.codebook import absorb, block_tuning, blockwise, finetune, layers, synthetic
from quantgate.tasks.quantize.codebook.absorb import NotAbsorbable, normalize_all_inputs
from quantgate.tasks.quantize.codebook.block_tuning import BlockTuning
from quantgate.tasks.quantize.codebook.blockwise import quantize_blockwise
from quantgate.tasks.quantize.codebook.finetune import finetune_checkpoint
from quantgate.tasks.quantize.codebook.layers import calibration_hessians, quantize_layers
from quantgate.tasks.quantize.codebook.synthetic import SYNTHETIC_TOKENS, teacher_sequences, vocabulary_starts
from quantgate.tasks.quantize.registry import quantizer_for
from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.traffic.load import read_requests
from quantgate.tasks.traffic.tokens import encode_request

VARIANT_RECORD = "quantgate_variant.json"
_OWN_KERNELS = (Path(__file__).parents[2] / "kernels",)


class QuantizeError(RuntimeError):
    """A variant could not be quantized; the message names the key or input to change."""


@dataclass(frozen=True)
class QuantizeResult:
    checkpoint: str
    seconds: float
    reused: bool
    cpu_seconds: float = float("nan")


def quantize_code_digest(method: str) -> str:
    """Our runner, the method's module and the modules its entry point lives in (int2_gptq runs
    int4_gptq's recipe), and the library versions that do the work."""
    module = quantizer_for(method)
    entry = (getattr(module, "layer_functions", None) or getattr(module, "convert", None)
             or module.build_recipe)
    own = hasattr(module, "layer_functions")
    return source_digest(sys.modules[__name__], module, sys.modules[entry.__module__], wna16, codebook_format,
                         layers, finetune, blockwise, block_tuning, absorb, synthetic,
                         packages=("llmcompressor", "compressed-tensors", "transformers", "torch"),
                         trees=_OWN_KERNELS if own else ())


def variant_dir(state_dir: str | Path, spec: VariantSpec, *, model_digest: str, calibration_hash: str,
                max_seq_len: int, threads: int) -> str:
    """Content-addressed output folder: same spec, model, calibration, code and thread count -> same
    folder. The thread count is in the key because it changes the result (LAPACK's Cholesky in GPTQ
    differs in the last bits between 1 and 2 threads, and rounding decisions follow); the rest of
    `resources` and the control flag do not, so they are not."""
    key = json.dumps([spec.model_dump(mode="json", exclude={"resources", "control"}), model_digest,
                      calibration_hash, max_seq_len, quantize_code_digest(spec.method), threads],
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return str(Path(state_dir) / "variants" / f"{spec.name}-{digest}")


def computed_with(threads: int) -> dict[str, Any]:
    """What a result depends on besides its inputs: equal inputs give equal bytes only with the same
    thread count, CPU instruction set and library versions (float reductions change with them)."""
    import platform

    return {"torch_threads": threads, "observed_threads": torch.get_num_threads(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


LOADED_BELOW = 0.75
"""Share of the wall time the main thread was on a CPU, under which a run counts as slowed by load.
The main thread, not the process: it computes all the time (it is worker 0 of every parallel region),
so the share is ~1 on an idle machine whatever the thread count, and falls when others take its CPU."""


def cut_by_load(record: dict[str, Any]) -> bool:
    """A result whose wall-clock budget cut layers short depends on how loaded the machine was: it
    is not reused when its main thread got under LOADED_BELOW of the time (the budget allows more
    on a machine that is not shared). A cut on an idle machine is what the budget buys: reused."""
    notes = record.get("notes", {})
    cut = notes.get("cut_layers") or notes.get("cheap_layers", 0)
    return bool(cut) and not record.get("main_thread_cpu_share", 0.0) >= LOADED_BELOW


def check_group_size(model: torch.nn.Module, spec: VariantSpec) -> None:
    group = getattr(spec, "group_size", None)
    if group is None:
        return
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not any(i in name for i in spec.ignore):
            if module.in_features % group:
                divisors = [g for g in (32, 64, 128) if module.in_features % g == 0]
                raise QuantizeError(
                    f"variants[{spec.name}].group_size={group} does not divide in_features="
                    f"{module.in_features} of {name}; use one of {divisors or 'a divisor'}"
                )


def check_residual(model: torch.nn.Module, spec: VariantSpec) -> None:
    """A residual stage that covers none of the model's quantized Linears is a config mistake."""
    residual = getattr(spec, "residual", None)
    if residual is None:
        return
    names = [name for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and not any(i in name for i in spec.ignore)]
    if not any(residual.covers(name) for name in names):
        own = sorted({name.rsplit(".", 1)[-1] for name in names if ".layers." in f".{name}"})
        raise QuantizeError(
            f"variants[{spec.name}].residual covers none of the model's quantized Linears: projections "
            f"{list(residual.projections)} (the blocks' own: {own}), blocks {residual.first_block}.."
            f"{residual.last_block if residual.last_block is not None else 'last'}")


def quantize_variant(
    spec: VariantSpec, *, model_path: str, calibration_path: str, out_dir: str, max_seq_len: int,
    threads: int,
) -> QuantizeResult:
    """`threads`: the torch threads this runs with (set by the caller), recorded with the result:
    float reductions are ordered by the thread count, so it is part of what the result depends on."""
    out = Path(out_dir)
    if (out / "DONE").is_file():
        record = json.loads((out / VARIANT_RECORD).read_text())
        if not cut_by_load(record):
            return QuantizeResult(str(out), record["seconds"], True, record.get("cpu_seconds", float("nan")))
        print(f"variants[{spec.name}]: the cached result at {out} had layers cut short by its time budget "
              f"on a loaded machine (its main thread ran {record.get('main_thread_cpu_share', 0):.0%} of the "
              "time); quantizing again", file=sys.stderr, flush=True)
    method = quantizer_for(spec.method)
    model = load_causal_lm(model_path)
    tokenizer = load_tokenizer(model_path)
    check_group_size(model, spec)
    check_residual(model, spec)
    rows = None
    if method.NEEDS_CALIBRATION:
        rows = _calibration_rows(tokenizer, calibration_path, spec.num_samples, max_seq_len)
    patches = getattr(method, "runtime_patches", contextlib.nullcontext)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    start, cpu, main_thread = time.perf_counter(), time.process_time(), time.thread_time()
    notes: dict[str, Any] = {}
    try:
        if hasattr(method, "layer_functions"):
            notes = _own_method(method, spec, model, tokenizer, rows, tmp, start)
        elif hasattr(method, "convert"):
            method.convert(spec, model).save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        else:
            with patches():
                _oneshot(model, method.build_recipe(spec), rows, max_seq_len)
            model.save_pretrained(tmp, save_compressed=True)
            tokenizer.save_pretrained(tmp)
    except torch.OutOfMemoryError as exc:
        raise QuantizeError(f"variants[{spec.name}]: out of memory; lower num_samples or "
                            f"raise resources.memory_gb ({exc})") from exc
    except HessianNotPositiveDefinite as exc:
        raise QuantizeError(f"variants[{spec.name}]: {exc}") from exc
    except NotAbsorbable as exc:
        raise QuantizeError(f"variants[{spec.name}].input_channel_power: {exc}; set it to 0 for this "
                            "model") from exc
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    record = {"spec": spec.model_dump(mode="json"), "seconds": seconds, "cpu_seconds": cpu_seconds,
              "main_thread_cpu_share": (time.thread_time() - main_thread) / max(seconds, 1e-9),
              "model": model_path,
              "calibration": calibration_path, "samples": len(rows or []), "notes": notes,
              "computed_with": computed_with(threads)}
    (tmp / VARIANT_RECORD).write_text(json.dumps(record, indent=1))
    (tmp / "DONE").touch()
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return QuantizeResult(str(out), seconds, False, cpu_seconds)


def _own_method(method: Any, spec: VariantSpec, model: Any, tokenizer: Any, rows: list[dict], out: Path,
                start: float) -> dict[str, Any]:
    """The method's layer loop (block-wise by default) under its budget, save, end-to-end tuning."""
    device = quantize_device(spec)
    model.to(device)
    batches = [torch.tensor([row["input_ids"]], device=device) for row in rows]  # [1, T] each
    # Written before the layer loop changes `model`, inside the budget (~1 s a sequence on 2 cores).
    own_text = []
    if spec.finetune_synthetic and spec.finetune_epochs:
        own_text = teacher_sequences(model, vocabulary_starts(tokenizer), spec.finetune_synthetic,
                                     SYNTHETIC_TOKENS, seed=spec.seed)
    blockwise = spec.sequential or spec.block_epochs > 0
    # The block-wise loop changes `model` as it goes: the end-to-end step needs the original.
    teacher = copy.deepcopy(model) if blockwise and spec.finetune_epochs else model
    fns = method.layer_functions(spec)
    hessians = None
    if not blockwise:
        hessians = calibration_hessians(model, batches, ignore=spec.ignore)
        hessians = normalize_all_inputs(model, hessians, fns.input_power, probe=batches[0])
    hessian_seconds = time.perf_counter() - start
    deadline = time.monotonic() + spec.time_budget_s - hessian_seconds
    # The share is of the time the Hessians leave, not of the whole budget: on one core the Hessians
    # of 64 samples take half of a 300 s budget, and a fixed reserve then left the layer loop nothing
    # (every layer rounded to nearest, PPL ×1,000; fine-tuning cannot repair that).
    reserve = max(0.0, deadline - time.monotonic()) * spec.finetune_share if spec.finetune_epochs else 0.0
    if blockwise:
        tuning = BlockTuning(epochs=spec.block_epochs, lr=spec.block_lr, sign_lr=spec.block_sign_lr,
                             sequential=spec.sequential, quantize_share=spec.block_search_share)
        result = quantize_blockwise(model, batches, target_linears(model, spec.ignore),
                                    deadline=deadline - reserve, tuning=tuning, fns=fns)
    else:
        result = quantize_layers(model, hessians, deadline=deadline - reserve, fns=fns)
    del hessians  # ~0.8 GB of float64 on SmolLM2: not needed by the fine-tuning
    save_codebook_checkpoint(model, tokenizer, layers=result.layers,
                             quantization_config=result.quantization_config, out=out)
    notes = result.notes | {"hessian_seconds": hessian_seconds,
                            "layers_seconds": time.perf_counter() - start - hessian_seconds}
    if spec.finetune_epochs:
        tuned = finetune_checkpoint(str(out), teacher, batches, deadline=deadline,
                                    epochs=spec.finetune_epochs, lr=spec.finetune_lr,
                                    sign_lr=spec.finetune_sign_lr,
                                    code_lr=spec.code_lr, code_fraction=spec.code_update_fraction,
                                    extra=own_text)
        notes |= {f"finetune_{k}": v for k, v in asdict(tuned).items()}
        notes["finetune_synthetic"] = len(own_text)
    return notes


def quantize_device(spec: VariantSpec) -> torch.device:
    """CUDA when the variant's resources ask for a GPU and one is there: the layer loop, Hessians and
    tuning then run on it, the same code as on the CPU (every kernel follows its inputs' device)."""
    if spec.resources.num_gpus > 0:
        if not torch.cuda.is_available():
            print(f"variants[{spec.name}]: resources.num_gpus={spec.resources.num_gpus} but no CUDA device "
                  "is visible; quantizing on the CPU", file=sys.stderr, flush=True)
        else:
            return torch.device("cuda")
    return torch.device("cpu")


def _calibration_rows(tokenizer: Any, path: str, n: int, max_len: int) -> list[dict[str, list[int]]]:
    """Token rows of the first `n` calibration requests: plain lists, so our own methods need no
    `datasets` (the GPU image lacks it); `_oneshot` wraps them for llm-compressor."""
    requests = read_requests(Path(path))[:n]
    rows = []
    for r in requests:
        ids = encode_request(tokenizer, r).input_ids[:max_len]
        rows.append({"input_ids": ids, "attention_mask": [1] * len(ids)})
    return rows


def _oneshot(model: Any, recipe: list[Any], rows: list[dict] | None, max_seq_len: int) -> None:
    from datasets import Dataset
    from llmcompressor import oneshot

    kwargs: dict[str, Any] = {"model": model, "recipe": recipe}
    if rows is not None:
        dataset = Dataset.from_list(rows)
        # Our sampler already drew a seeded, stratified sample; llm-compressor's own unseeded
        # shuffle would make observers and GPTQ's error feedback differ run to run.
        kwargs |= {"dataset": dataset, "max_seq_length": max_seq_len,
                   "num_calibration_samples": len(dataset), "shuffle_calibration_samples": False}
    oneshot(**kwargs)
