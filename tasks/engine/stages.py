"""Prefect tasks for the serving engine: ask it about each format before quantizing."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from quantgate.conf.engine import EngineConf
from quantgate.conf.methods import VariantSpec
from quantgate.tasks.engine.probe import ProbeResult, probe_formats
from quantgate.tasks.model.source import ModelRef
from quantgate.tasks.runtime.threads import set_threads
from quantgate.tasks.traffic.prepare import PreparedTraffic


@task(name="probe-formats")
def probe_task(*, specs: list[VariantSpec], model: ModelRef, traffic: PreparedTraffic, engine: EngineConf,
               state_dir: str) -> dict[str, ProbeResult]:
    set_threads(1)
    return probe_formats(specs, model_path=model.path, model_digest=model.digest,
                         calibration_path=traffic.calibration_path, engine=engine, state_dir=state_dir)


@task(name="known-refusals")
def refusals_task(*, variants: tuple[VariantSpec, ...], model: ModelRef, traffic: PreparedTraffic,
                  engine: EngineConf, max_seq_len: int, state_dir: str) -> dict[str, str]:
    """Variant -> why the engine refused its format on this machine (remembered), for the variants not
    quantized already: a rerun keeps what it has (run twice, nothing changes the second time)."""
    from quantgate.tasks.engine.refusals import known_format_refusal
    from quantgate.tasks.quantize.run import variant_dir

    refused = {}
    for spec in variants:
        if not (why := known_format_refusal(spec, model.path, engine)):
            continue
        done = Path(variant_dir(state_dir, spec, model_digest=model.digest, max_seq_len=max_seq_len,
                                calibration_hash=traffic.calibration_hash,
                                threads=max(1, int(spec.resources.num_cpus)))) / "DONE"
        if not done.is_file():
            refused[spec.name] = why
    return refused
