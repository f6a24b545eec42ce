"""Which matmul kernel the engine gave each quantized layer, read from the engine's own log.

vLLM picks a linear kernel per quantization scheme and platform and says so at INFO level ("Selected
CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8", "Using CPUWNA16LinearKernel for
mixed-precision linear"). Some picks are fallbacks with no fast path on the target: FP8 W8A8 on a CPU
without AMX-FP8 runs through torch's `_scaled_mm` (`ChannelWiseTorchFP8ScaledMMLinearKernel`), where a
first chat had not finished after 5 minutes. A variant that would serve on a fallback is not worth
measuring or serving on this target: it is refused with the kernel's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_PICKED = re.compile(r"(?:Selected|Using) (\w+Kernel\w*) for ([\w. -]+?)(?: GEMM)?(?:\s*$|,)")
# torch's generic scaled-mm paths and emulations: correct, with no fast kernel behind them
FALLBACK = re.compile(r"^(?:PerTensor|RowWise|ChannelWise|BlockWise)TorchFP8|Emulation")


@dataclass(frozen=True)
class KernelChoice:
    kernel: str
    scheme: str  # what vLLM said it was for: a scheme class, or "mixed-precision linear"

    @property
    def fallback(self) -> bool:
        return bool(FALLBACK.search(self.kernel))


def kernels_in_log(text: str) -> list[KernelChoice]:
    """Every distinct (kernel, scheme) pick the engine logged, in order."""
    seen: dict[tuple[str, str], KernelChoice] = {}
    for line in text.splitlines():
        if m := _PICKED.search(line):
            seen.setdefault((m.group(1), m.group(2).strip()), KernelChoice(m.group(1), m.group(2).strip()))
    return list(seen.values())


def fallback_reason(log_path: Path, platform: str) -> str:
    """Why this checkpoint should not be served on `platform` ("" when every kernel is a fast one)."""
    try:
        picks = kernels_in_log(log_path.read_text(errors="replace"))
    except OSError:
        return ""
    slow = sorted({p.kernel for p in picks if p.fallback})
    if not slow:
        return ""
    return (f"vLLM serves it on a fallback kernel on {platform} ({', '.join(slow)}: torch's generic path, "
            "no native kernel for this format here)")
