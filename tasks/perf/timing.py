"""Speed, memory and energy of the baseline and each variant, measured side by side in one process.

Per model and batch size: prefill tokens/s, TTFT (prompt in, first token out), TPOT (each later
token), decode tokens/s (batch × tokens / decode time), peak memory, weight bytes, and J/token
over the steady-state decode window (every token after the first; meters in `tasks/perf/energy.py`).

Fairness on a shared, noisy machine: every model is loaded first, then measured in rounds, each
round running every model once at every batch size, so drift hits all alike; each figure is the
median over rounds after `warmup` unrecorded rounds. Prompts are real held-out traffic: the
chat-rendered prompts' tokens, concatenated and cut into rows of exactly `prompt_tokens`.
Decoding is greedy with the KV cache, `min_new_tokens` forced (no early stop), logits only for
the last position, as a server computes them.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from quantgate.tasks.perf.energy import EnergyMeter


@dataclass(frozen=True)
class Speed:
    batch: int
    prefill_tok_s: float
    ttft_ms: float
    tpot_ms: float
    decode_tok_s: float
    j_per_token: float
    peak_bytes: int
    # Served (engine_bench.py): `batch` is the clients in flight, the latencies above are p50s.
    req_s: float | None = None
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    e2e_p95_ms: float | None = None


@dataclass(frozen=True)
class ModelBench:
    name: str
    path: str  # how it ran: "int4 g64 via packed-int4 CPU matmul, bf16 activations", ...
    disk_bytes: int  # the checkpoint's tensors
    resident_bytes: int  # the loaded model's tensors: what a decode step can at most read
    speeds: dict[int, Speed]  # by batch size


Loader = Callable[[str, str], tuple[torch.nn.Module, str]]  # (name, path) -> (model, how it runs)


def prompt_rows(token_stream: list[int], *, batch: int, prompt_tokens: int) -> torch.Tensor:
    need = batch * prompt_tokens
    if len(token_stream) < need:
        raise ValueError(f"bench: {len(token_stream)} prompt tokens in the held-out traffic, need "
                         f"batch × prompt_tokens = {need}; lower bench.prompt_tokens or bench.batch_sizes")
    return torch.tensor(token_stream[:need]).view(batch, prompt_tokens)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _PeakRss:
    """Samples this process's resident memory in a thread: CPU has no allocator high-water mark."""

    def __init__(self) -> None:
        import psutil

        self._proc, self._stop, self.peak = psutil.Process(), threading.Event(), 0
        self.start_rss = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def growth(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(0, self.peak - self.start_rss)


Steps = tuple[Callable[[], torch.Tensor], Callable[[], list[torch.Tensor]]]


def _decode_steps(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int,
                  step: Callable[..., Any] | None) -> Steps:
    """(prefill, decode) closures. `step` (a compiled forward) decodes on a static cache, so every
    step has the same shapes and one graph serves them all; None: eager with the dynamic cache."""
    state: dict[str, Any] = {}
    p = ids.shape[1]

    def prefill() -> torch.Tensor:
        kw: dict[str, Any] = {}
        if step is not None:
            from transformers import StaticCache

            kw = {"past_key_values": StaticCache(config=model.config, max_cache_len=p + new_tokens),
                  "cache_position": torch.arange(p, device=ids.device)}
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **kw)
        state["cache"], state["next"] = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        return state["next"]

    def decode() -> list[torch.Tensor]:
        fwd, tokens = step or model, []
        for i in range(new_tokens - 1):
            kw = {"cache_position": torch.tensor([p + i], device=ids.device)} if step is not None else {}
            out = fwd(input_ids=state["next"], past_key_values=state["cache"], use_cache=True,
                      logits_to_keep=1, **kw)
            state["next"] = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(state["next"])
            if step is None:
                state["cache"] = out.past_key_values
        return tokens

    return prefill, decode


@torch.no_grad()
def time_generation(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int,
                    meter: EnergyMeter, *, step: Callable[..., Any] | None = None
                    ) -> tuple[float, float, float, int]:
    """(prefill seconds incl. the first token, decode seconds for the other tokens, joules of the
    decode window, peak bytes above the loaded model). `step`: a compiled forward for decoding."""
    if new_tokens < 2:
        raise ValueError("bench.new_tokens must be ≥ 2: the decode window is every token after the first")
    device = ids.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        rss = _PeakRss()
    prefill, decode = _decode_steps(model, ids, new_tokens, step)
    _sync(device)
    t0 = time.perf_counter()
    prefill()
    _sync(device)
    t1 = time.perf_counter()
    meter.begin()
    # oneDNN's bf16 GEMV is slow on this CPU (see kernels.bf16_cpu); in a compiled graph that
    # module is a plain Linear, so single-sequence compiled decoding turns oneDNN off itself.
    with torch.backends.mkldnn.flags(enabled=not (step is not None and ids.shape[0] == 1)):
        decode()
    reading = meter.end()  # the meter syncs the GPU itself
    t2 = time.perf_counter()
    peak = (torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else rss.growth())
    return t1 - t0, t2 - t1, reading.joules, peak


def resident_bytes(model: torch.nn.Module) -> int:
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        key = t.untyped_storage().data_ptr()
        if key not in seen:  # tied embeddings share one storage
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def bench_models(paths: dict[str, str], *, loader: Loader, token_stream: list[int],
                 batch_sizes: tuple[int, ...], prompt_tokens: int, new_tokens: int, warmup: int,
                 repeats: int, meter: EnergyMeter, device: str = "cpu",
                 disk_bytes: Callable[[str], int] | None = None,
                 compile_decode: bool = False) -> dict[str, ModelBench]:
    """`compile_decode`: decode steps through torch.compile on a static cache (compiled in the warm-up
    rounds, which must then be ≥ 1); prefill stays eager."""
    if compile_decode and warmup < 1:
        raise ValueError("bench.compile needs bench.warmup ≥ 1: the first round compiles")
    dev = torch.device(device)
    models, steps_fn = {}, {}
    for name, path in paths.items():
        model, how = loader(name, path)
        models[name] = (model.to(dev), how + ("; decode compiled (torch.compile, static cache)"
                                              if compile_decode else ""))
        steps_fn[name] = torch.compile(model.forward, dynamic=False) if compile_decode else None
    if compile_decode:
        # Every model shares LlamaForCausalLM.forward's code object: one graph per (model, batch).
        from torch._dynamo import config as dynamo

        dynamo.cache_size_limit = max(torch._dynamo.config.cache_size_limit,
                                      4 * len(paths) * len(batch_sizes))
        dynamo.accumulated_cache_size_limit = max(
            dynamo.accumulated_cache_size_limit, 8 * len(paths) * len(batch_sizes))
    rows = {b: prompt_rows(token_stream, batch=b, prompt_tokens=prompt_tokens).to(dev) for b in batch_sizes}
    samples: dict[tuple[str, int], list[tuple[float, float, float, int]]] = {
        (n, b): [] for n in models for b in batch_sizes}
    for round_ in range(warmup + repeats):
        for name, (model, _) in models.items():
            for b in batch_sizes:
                got = time_generation(model, rows[b], new_tokens, meter, step=steps_fn[name])
                if round_ >= warmup:
                    samples[(name, b)].append(got)
    out = {}
    for name, (model, how) in models.items():
        speeds = {}
        for b in batch_sizes:
            runs = samples[(name, b)]
            prefill, decode, joules, peak = (statistics.median(col) for col in zip(*runs, strict=True))
            steps = new_tokens - 1
            speeds[b] = Speed(b, prefill_tok_s=b * prompt_tokens / prefill, ttft_ms=prefill * 1e3,
                              tpot_ms=decode * 1e3 / steps, decode_tok_s=b * steps / decode,
                              j_per_token=joules / (b * steps),
                              peak_bytes=int(resident_bytes(model) + peak))
        out[name] = ModelBench(name, how, disk_bytes(paths[name]) if disk_bytes else 0,
                               resident_bytes(model), speeds)
    return out


def as_json(benches: dict[str, ModelBench]) -> dict[str, dict]:
    return {n: {**asdict(m), "speeds": {str(b): asdict(s) for b, s in m.speeds.items()}}
            for n, m in benches.items()}


def from_json(data: dict[str, dict]) -> dict[str, ModelBench]:
    return {n: ModelBench(**{**m, "speeds": {int(b): Speed(**s) for b, s in m["speeds"].items()}})
            for n, m in data.items()}


def heldout_prompt_tokens(tokenizer_path: str, heldout_path: str) -> list[int]:
    """The held-out requests' prompts, chat-rendered with the generation prompt, as one stream."""
    from quantgate.tasks.model.load import load_tokenizer
    from quantgate.tasks.traffic.load import read_requests
    from quantgate.tasks.traffic.tokens import encode_request

    tok = load_tokenizer(tokenizer_path)
    stream: list[int] = []
    for req in read_requests(Path(heldout_path)):
        enc = encode_request(tok, req)
        stream += enc.input_ids[: enc.answer_start]
    return stream
