"""The W4A16 group-wise weight scheme shared by the INT4 methods (RTN, GPTQ, AWQ)."""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Int4Awq, Int4Gptq, Int4Rtn


def w4a16_groups(spec: Int4Rtn | Int4Gptq | Int4Awq, *, actorder: str | None = None) -> dict:
    weights: dict[str, Any] = {"num_bits": 4, "type": "int", "symmetric": spec.symmetric,
                               "strategy": "group", "group_size": spec.group_size}
    if actorder is not None:
        weights["actorder"] = actorder
    return {"group_0": {"targets": ["Linear"], "weights": weights}}
