"""Prefect tasks for evaluation: perplexity by slice and the lm-eval suite, for the baseline and
each variant through the same code, results next to what was evaluated. A result file is named
for everything it depends on (model folder, held-out set, settings, code digest), so the
baseline's evaluations are reused across runs and a killed run resumes without redoing them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from prefect import task

from quantgate.conf.engine import EngineConf
from quantgate.conf.schema import EvalConf, LmEvalConf, LongContextConf
from quantgate.tasks.engine.checkpoints import servable
from quantgate.tasks.engine.refusals import on_engine_or_refusal
from quantgate.tasks.engine.session import EngineSession
from quantgate.tasks.evaluate.lmeval import LmEvalResult, lmeval_dir_name, read_lmeval, run_lmeval
from quantgate.tasks.evaluate.long_context import LongContextResult, read_long_context, run_long_context
from quantgate.tasks.evaluate.on_engine import evaluate_on_engine, lmeval_on_engine, scorer_key
from quantgate.tasks.evaluate.perplexity import EvalResult, eval_file_name, evaluate_checkpoint, read_eval
from quantgate.tasks.runtime.caching import CACHED
from quantgate.tasks.runtime.threads import set_threads
from quantgate.tasks.traffic.prepare import PreparedTraffic


@task(name="evaluate", task_run_name="evaluate-{variant}", **CACHED)
def evaluate_task(*, variant: str, checkpoint: str, results_dir: str, traffic: PreparedTraffic,
                  conf: EvalConf, engine: EngineConf, state_dir: str, baseline: EvalResult | None = None,
                  look: str = "all", first_share: float = 1.0, first: EvalResult | None = None,
                  baseline_checkpoint: str = "", baseline_results_dir: str = "") -> EvalResult:
    """`evaluate_model` as a task of its own (the baseline's perplexity; a variant's runs in
    `gate.staged.score_in_stages`, its looks and task evals on one engine server)."""
    return evaluate_model(variant=variant, checkpoint=checkpoint, results_dir=results_dir, traffic=traffic,
                          conf=conf, engine=engine, state_dir=state_dir, baseline=baseline, look=look,
                          first_share=first_share, first=first, baseline_checkpoint=baseline_checkpoint,
                          baseline_results_dir=baseline_results_dir)


def evaluate_model(*, variant: str, checkpoint: str, results_dir: str, traffic: PreparedTraffic,
                   conf: EvalConf, engine: EngineConf, state_dir: str, baseline: EvalResult | None = None,
                   look: str = "all", first_share: float = 1.0, first: EvalResult | None = None,
                   baseline_checkpoint: str = "", baseline_results_dir: str = "",
                   session: EngineSession | None = None) -> EvalResult:
    """The baseline (`baseline` None) records its top-k next-token record; a variant measures its
    KL from that record. `look`: all requests, or the first look of a two-look screen, or the rest
    (merged with `first`). With eval.backend engine, scored by the serving engine; a checkpoint the
    engine does not serve (no production engine for its format, or the engine refuses it on this
    machine) is scored on the reference path against the baseline scored there (`baseline_*`:
    where that baseline is, evaluated here if it is not yet), labelled with the reason. `session`:
    the engine server to score on, kept up for the caller's next evaluation (else one for this)."""
    not_served = servable(checkpoint) if conf.backend == "engine" else ""
    if conf.backend == "engine" and not not_served:
        out = Path(results_dir) / eval_file_name(traffic.heldout_path, conf, look, first_share,
                                                 scorer_key(engine))
        if out.is_file():  # same model, held-out set, settings and code: the result is on disk
            return read_eval(str(out))
        result, refusal = on_engine_or_refusal(lambda: evaluate_on_engine(
            checkpoint, traffic.heldout_path, str(out), engine=engine, state_dir=state_dir,
            window=conf.window, name=variant, reference=baseline.reference_path if baseline else None,
            record_reference=baseline is None, look=look, first_share=first_share, first=first,
            session=session),
            checkpoint, engine, is_baseline=baseline is None)
        if result is not None:
            return result
        not_served = f"not served on vLLM here: {refusal}"
        print(f"      {variant}: {not_served}; scored on the reference path", flush=True)
    if not_served and baseline is not None:  # paired with the baseline on the same path
        baseline = reference_baseline(baseline_checkpoint, baseline_results_dir, traffic, conf)
    out = Path(results_dir) / eval_file_name(traffic.heldout_path, conf, look, first_share)
    if out.is_file():
        return dataclasses.replace(read_eval(str(out)), not_served=not_served,
                                   paired_baseline=_paired(baseline, not_served))
    set_threads(conf.num_cpus)
    return evaluate_checkpoint(checkpoint, traffic.heldout_path, str(out), window=conf.window,
                               batch_size=conf.batch_size, dtype=conf.dtype,
                               reference=baseline.reference_path if baseline else None,
                               record_reference=baseline is None, look=look, first_share=first_share,
                               first=first, not_served=not_served,
                               paired_baseline=_paired(baseline, not_served))


def scored_line(name: str, result: EvalResult | None) -> str:
    """What scored a variant's perplexity, for the run's output."""
    if result is None:
        return f"{name}: not scored"
    if result.not_served:
        return f"{name}: {result.not_served}; scored on the reference path against the baseline scored there"
    if result.engine_startup_s is not None:  # an engine scored it
        return (f"{name}: scored by {result.scored_by}, engine up in {result.engine_startup_s:.0f} s, "
                f"{result.seconds - result.engine_startup_s:.0f} s scoring")
    return f"{name}: scored by {result.scored_by}"


def _paired(baseline: EvalResult | None, not_served: str) -> str:
    return baseline.result_path if baseline is not None and not_served else ""


@task(name="reference-baseline", **CACHED)
def reference_baseline_task(*, checkpoint: str, results_dir: str, traffic: PreparedTraffic,
                            conf: EvalConf) -> EvalResult:
    """The baseline on the reference path, once, before the variants that are scored there need it
    (each would evaluate it on demand, two at once in parallel: seen, two cores on the same work)."""
    return reference_baseline(checkpoint, results_dir, traffic, conf)


def reference_baseline(checkpoint: str, results_dir: str, traffic: PreparedTraffic, conf: EvalConf
                       ) -> EvalResult:
    """The baseline scored on the reference path, with its top-k record: read where an earlier
    variant left it, else evaluated now (written atomically: two variants racing write the same)."""
    if not checkpoint:
        raise ValueError("a variant scored on the reference path needs the baseline's checkpoint")
    out = Path(results_dir) / eval_file_name(traffic.heldout_path, conf)
    if out.is_file():
        return read_eval(str(out))
    set_threads(conf.num_cpus)
    return evaluate_checkpoint(checkpoint, traffic.heldout_path, str(out), window=conf.window,
                               batch_size=conf.batch_size, dtype=conf.dtype, record_reference=True)


# Prints stay prints here: `datasets` fingerprints lm-eval's data with dill, which reads a function's
# globals from `dis.dis` output captured off sys.stdout; Prefect's print-to-log (log_prints) took that
# output into the run's log (a dozen lines of bytecode per eval task), and dill saw none of it.
@task(name="lm-eval", task_run_name="lm-eval-{variant}", log_prints=False, **CACHED)
def lmeval_task(*, variant: str, checkpoint: str, results_dir: str, traffic: PreparedTraffic,
                conf: LmEvalConf, dtype: str, engine: EngineConf | None = None, state_dir: str = "",
                is_baseline: bool = True, baseline_checkpoint: str = "",
                baseline_results_dir: str = "") -> LmEvalResult:
    """`task_evals` as a task of its own (the baseline's)."""
    return task_evals(variant=variant, checkpoint=checkpoint, results_dir=results_dir, traffic=traffic,
                      conf=conf, dtype=dtype, engine=engine, state_dir=state_dir, is_baseline=is_baseline,
                      baseline_checkpoint=baseline_checkpoint, baseline_results_dir=baseline_results_dir)


def task_evals(*, variant: str, checkpoint: str, results_dir: str, traffic: PreparedTraffic,
               conf: LmEvalConf, dtype: str, engine: EngineConf | None = None, state_dir: str = "",
               is_baseline: bool = True, baseline_checkpoint: str = "", baseline_results_dir: str = "",
               session: EngineSession | None = None) -> LmEvalResult:
    """The task suite on one model. lmeval.backend `engine`: through the serving engine's server of
    this checkpoint; a checkpoint the engine does not serve runs on the HF path against the baseline
    run there (`baseline_*`: where that baseline is, run here if it is not yet), labelled."""
    on_engine = conf.backend == "engine" and engine is not None
    not_served = servable(checkpoint) if on_engine else ""
    if on_engine and not not_served:
        out = Path(results_dir) / lmeval_dir_name(traffic.heldout_path, scorer_key(engine),
                                                  conf.model_dump_json())
        if (out / "lmeval.json").is_file():  # written last: a finished evaluation of the same inputs
            return read_lmeval(str(out / "lmeval.json"))
        result, refusal = on_engine_or_refusal(lambda: lmeval_on_engine(
            checkpoint, str(out), name=variant, engine=engine, state_dir=state_dir, tasks=list(conf.tasks),
            replay_path=traffic.heldout_path, replay_size=conf.replay_size, limit=conf.limit,
            session=session),
            checkpoint, engine, is_baseline=is_baseline)
        if result is not None:
            return result
        not_served = f"not served on vLLM here: {refusal}"
        print(f"      {variant}: {not_served}; task evals on the HF path", flush=True)
    hf = conf.model_copy(update={"backend": "hf"}) if conf.backend == "engine" else conf
    paired = not_served and _lmeval_on_hf(baseline_checkpoint, baseline_results_dir, traffic, hf, dtype)
    result = _lmeval_on_hf(checkpoint, results_dir, traffic, hf, dtype)
    return dataclasses.replace(result, not_served=not_served, paired_baseline=(
        str(Path(paired.samples_path).parent / "lmeval.json") if paired else ""))


def _lmeval_on_hf(checkpoint: str, results_dir: str, traffic: PreparedTraffic, conf: LmEvalConf,
                  dtype: str) -> LmEvalResult:
    """lm-eval's HF model on our loader: read where it ran before (the baseline for several variants
    the engine does not serve), else run now."""
    if not checkpoint:
        raise ValueError("a variant run on the HF path needs the baseline's checkpoint")
    out = Path(results_dir) / lmeval_dir_name(traffic.heldout_path, dtype, conf.model_dump_json())
    if (out / "lmeval.json").is_file():  # written last: a finished evaluation of the same inputs
        return read_lmeval(str(out / "lmeval.json"))
    set_threads(conf.num_cpus)
    return run_lmeval(checkpoint, str(out), tasks=list(conf.tasks), replay_path=traffic.heldout_path,
                      replay_size=conf.replay_size, batch_size=conf.batch_size, dtype=dtype,
                      limit=conf.limit, backend=conf.backend)


@task(name="long-context", task_run_name="long-context-{variant}", **CACHED)
def long_context_task(*, variant: str, checkpoint: str, results_dir: str, conf: LongContextConf,
                      dtype: str) -> LongContextResult:
    """Long-document perplexity and passkey retrieval at the served context (long_context.py)."""
    from quantgate.tasks.evaluate.perplexity import eval_code_digest

    key = f"{conf.context}x{conf.documents}x{conf.block}-{'-'.join(f'{d:g}' for d in conf.depths)}"
    out = Path(results_dir) / f"long-{dtype}-{key}-{eval_code_digest()}.json"
    if out.is_file():
        return read_long_context(str(out))
    set_threads(conf.num_cpus)
    return run_long_context(checkpoint, str(out), context=conf.context, documents=conf.documents,
                            block=conf.block, depths=conf.depths, dtype=dtype)
