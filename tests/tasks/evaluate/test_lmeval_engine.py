"""Task evals through the serving engine: lm-eval's completions model against vLLM's server of the
checkpoint, the chat template applied on our side. On the baseline it agrees item by item with
lm-eval's HF model on our loader; a checkpoint the engine refuses runs on the HF path, paired with
the baseline run there, and the gate reads that pairing."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.conf.schema import LmEvalConf
from quantgate.tasks.evaluate.stages import lmeval_task
from quantgate.tasks.gate.decide import paired_lmeval
from quantgate.tasks.quantize.run import quantize_variant

from factories import calibration_file, heldout_traffic

pytestmark = pytest.mark.timeout(900)

FP32 = EngineConf(dtype="float32", max_model_len=512, start_timeout_s=300)  # the HF path's dtype


def _items(result) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in open(result.samples_path, encoding="utf-8")]
    return {(r["task"], r["id"]): (r["metrics"], r["reply"]) for r in rows}


def test_task_evals_on_the_engine_match_the_hf_path_and_a_refused_variant_pairs_on_hf(
        tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # this machine's memory, fresh
    traffic = heldout_traffic(tmp_path, 12)
    conf = LmEvalConf(tasks=("qg_facts_mc", "qg_replay"), limit=6, replay_size=6, batch_size=4,
                      backend="engine")
    common = {"traffic": traffic, "conf": conf, "dtype": "float32", "engine": FP32,
              "state_dir": str(tmp_path / "state")}
    base_dir = str(tmp_path / "base")
    served = lmeval_task.fn(variant="baseline", checkpoint=tiny_model, results_dir=base_dir, **common)
    assert served.scored_by.startswith("vllm") and not served.not_served
    hf = lmeval_task.fn(variant="baseline", checkpoint=tiny_model, results_dir=base_dir,
                        **(common | {"conf": conf.model_copy(update={"backend": "hf"})}))
    assert hf.scored_by == "hf, float32"
    assert _items(served) == _items(hf)  # every item's metrics and reply, loglikelihood and generation
    assert len(_items(served)) == 12

    spec = TypeAdapter(VariantSpec).validate_python({"name": "f", "method": "fp8_w8a8"})
    fp8 = quantize_variant(spec, model_path=tiny_model, calibration_path=str(calibration_file(tmp_path)),
                           out_dir=str(tmp_path / "fp8"), max_seq_len=64, threads=1).checkpoint
    got = lmeval_task.fn(variant="fp8", checkpoint=fp8, results_dir=fp8, is_baseline=False,
                         baseline_checkpoint=tiny_model, baseline_results_dir=base_dir, **common)
    assert "fallback kernel" in got.not_served and got.scored_by == "hf, float32"
    assert paired_lmeval(got, served).samples_path == hf.samples_path  # the HF baseline, not the engine's
