"""Ask the serving engine, before quantizing, whether it serves a variant's format on this machine.

vLLM's CPU builds refuse some formats only once a checkpoint is in front of them: W4A16 has no kernel
in the AVX2 build (it fails at the first forward), an FP8 KV cache is refused at load without AVX-512,
FP8 W8A8 would run on torch's generic `_scaled_mm`. Found at evaluation, a refusal costs the variant's
whole quantization (minutes for GPTQ or AWQ on 2 cores) and a scoring on the reference path. So the
planner asks first: the variant's own method quantizes a one-layer model of the same architecture and
shapes (random weights: kernels are chosen by format and shape, not values) on a few calibration
samples, and the engine loads it as the server would load the real checkpoint, first token included:
every format still unknown in one engine process (`load_check.py`: ~3 s each after one import, where
a server start-up per format cost ~20 s of one core). A refusal is remembered (`support.py`) under
the checkpoint's format and the variant spec's, so the planner skips the variant with the engine's
words, this run and the next; a format served is remembered too and not asked again. A probe that
fails for another reason (memory, no answer in time, a quantization error) decides nothing: the
variant runs and the evaluation finds out as before.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.tasks.engine import support
from quantgate.tasks.engine.checkpoints import engine_spec
from quantgate.tasks.engine.server import EngineStartError

PROBE_SAMPLES, PROBE_SEQ_LEN = 4, 64


@dataclass(frozen=True)
class ProbeResult:
    status: str  # served | refused | unknown (the probe could not tell; the variant runs)
    reason: str = ""  # the engine's words (refused), or why the probe could not tell
    asked: bool = False  # an engine was started for it (not answered from memory)

    def line(self, name: str) -> str:
        how = "" if self.asked else " (remembered)"
        if self.status == "served":
            return f"{name}: the engine serves its format here{how}"
        if self.status == "refused":
            return f"{name}: the engine refuses its format here{how}: {self.reason}"
        return f"{name}: the probe could not tell ({self.reason}); quantized and evaluated as usual"


def probe_candidates(specs: list[VariantSpec]) -> list[VariantSpec]:
    """The variants worth asking about: in a format the engine loads at all (not QuIP#/AQLM, not the
    dense bf16 copy), one per format (two methods may share one), asked with a variant that can win
    where one shares the format. Controls are asked too: they are measured anyway, but a refused one
    is scored on the reference path in two looks (a collapsed control stops at the first) and starts
    no engine at its evaluation."""
    seen, out = set(), []
    for s in sorted(specs, key=lambda s: s.control):  # stable: the plan's order within each kind
        if not type(s).engine_serves or s.method == "baseline_bf16":
            continue
        fmt = json.dumps([s.kernel, getattr(s, "num_bits", None), s.kv_bits, s.native_compute,
                          getattr(s, "group_size", None), getattr(s, "symmetric", None)])
        if fmt not in seen:
            seen.add(fmt)
            out.append(s)
    return out


def probe_model(model_path: str, out_dir: Path) -> str:
    """A one-layer model with `model_path`'s architecture, shapes and tokenizer; random weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from quantgate.tasks.model.load import load_tokenizer

    if (out_dir / "DONE").is_file():
        return str(out_dir)
    config = AutoConfig.from_pretrained(model_path)
    config.num_hidden_layers = 1
    if getattr(config, "layer_types", None):  # per-layer attention kinds (Qwen3, Gemma 3): the first
        config.layer_types = config.layer_types[:1]
    torch.manual_seed(0)
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp)
    load_tokenizer(model_path).save_pretrained(tmp)
    (tmp / "DONE").touch()
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return str(out_dir)


def probe_formats(specs: list[VariantSpec], *, model_path: str, model_digest: str, calibration_path: str,
                  engine: EngineConf, state_dir: str) -> dict[str, ProbeResult]:
    """Whether the engine serves each spec's format here: from memory, or asked of one engine process
    that loads every format still unknown (`load_check.py`), each as a one-layer checkpoint."""
    from quantgate.tasks.engine.refusals import known_format_refusal, spec_support_key
    from quantgate.tasks.quantize.run import QuantizeError

    results: dict[str, ProbeResult] = {}
    ask: dict[str, tuple[str, str]] = {}  # name -> (memory key, one-layer checkpoint)
    for spec in specs:
        key = spec_support_key(spec, model_path, engine)
        if why := known_format_refusal(spec, model_path, engine):
            results[spec.name] = ProbeResult("refused", why)
        elif key is None:
            results[spec.name] = ProbeResult("unknown", "no serving engine installed")
        elif support.served_before(key):
            results[spec.name] = ProbeResult("served")
        else:
            try:
                ask[spec.name] = key, _one_layer_checkpoint(spec, model_path, model_digest, calibration_path,
                                                            Path(state_dir))
            except QuantizeError as exc:  # the real quantization will say it, with the key to change
                results[spec.name] = ProbeResult("unknown", str(exc))
    if ask:
        results |= _ask(ask, engine, state_dir)
    return {s.name: results[s.name] for s in specs}


def _one_layer_checkpoint(spec: VariantSpec, model_path: str, model_digest: str, calibration_path: str,
                          state_dir: Path) -> str:
    from quantgate.tasks.quantize.run import quantize_variant

    root = state_dir / "probes" / model_digest[:16]
    small = spec.model_copy(update={"name": f"probe-{spec.name}", "num_samples": PROBE_SAMPLES})
    digest = hashlib.sha256(small.model_dump_json().encode()).hexdigest()[:12]
    return quantize_variant(small, model_path=probe_model(model_path, root / "model"),
                            calibration_path=calibration_path, out_dir=str(root / digest),
                            max_seq_len=PROBE_SEQ_LEN, threads=1).checkpoint


def _ask(ask: dict[str, tuple[str, str]], engine: EngineConf, state_dir: str) -> dict[str, ProbeResult]:
    """The engine's answers, learnt: a refusal (a fallback kernel too) and a format served are
    remembered; the machine's trouble (memory, no answer in time) decides nothing."""
    from quantgate.tasks.engine.environment import find_engine
    from quantgate.tasks.engine.load_check import check_loads, load_log
    from quantgate.tasks.engine.refusals import fallback_refusal, learn_refusal

    specs = {f"probe-{name}": engine_spec(checkpoint, f"probe-{name}", engine)
             for name, (_, checkpoint) in ask.items()}
    try:
        answers = check_loads(specs, python=find_engine(engine.python).python, state_dir=Path(state_dir),
                              timeout_s=engine.start_timeout_s)
    except EngineStartError as exc:  # the engine's process could not start: nothing learnt
        return {name: ProbeResult("unknown", exc.reason, asked=True) for name in ask}
    results = {}
    for name, (key, checkpoint) in ask.items():
        refusal = answers[f"probe-{name}"]
        if refusal is None:
            refusal = fallback_refusal(load_log(Path(state_dir), f"probe-{name}"))
        if refusal is None:
            support.remember_served(key, checkpoint=checkpoint)
            results[name] = ProbeResult("served", asked=True)
        elif refusal.transient:  # the machine's trouble, not the format's
            results[name] = ProbeResult("unknown", refusal.reason, asked=True)
        else:
            learn_refusal(checkpoint, engine, refusal)
            results[name] = ProbeResult("refused", refusal.reason, asked=True)
    return results

