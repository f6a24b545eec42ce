"""Prefect task for one variant's quantization: a content-addressed checkpoint folder."""

from __future__ import annotations

from prefect import task

from quantgate.conf.methods import VariantSpec
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.quantize.run import QuantizeResult, quantize_variant, variant_dir
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.threads import set_threads
from quantgate.tasks.traffic.prepare import PreparedTraffic


@task(name="quantize", task_run_name="quantize-{spec.name}", tags=["quantize"], **CACHED)
def quantize_task(*, spec: VariantSpec, model: ModelRef, traffic: PreparedTraffic, max_seq_len: int,
                  state_dir: str) -> QuantizeResult:
    threads = set_threads(spec.resources.num_cpus)
    out = variant_dir(state_dir, spec, model_digest=model.digest, calibration_hash=traffic.calibration_hash,
                      max_seq_len=max_seq_len, threads=threads)
    return quantize_variant(spec, model_path=model.path, calibration_path=traffic.calibration_path,
                            out_dir=out, max_seq_len=max_seq_len, threads=threads)
