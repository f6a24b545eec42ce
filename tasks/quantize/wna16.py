"""The WnA16 group-wise weight scheme shared by the scalar integer methods (RTN, GPTQ, AWQ at 4
bits; RTN and GPTQ at 2 bits as controls). The bit width comes from the spec class."""

from __future__ import annotations

from typing import Any

from quantgate.conf.methods import Int4Awq, Int4Gptq, Int4Rtn


def w4a16_groups(spec: Int4Rtn | Int4Gptq | Int4Awq, *, actorder: str | None = None) -> dict:
    weights: dict[str, Any] = {"num_bits": spec.num_bits, "type": "int", "symmetric": spec.symmetric,
                               "strategy": "group", "group_size": spec.group_size}
    if actorder is not None:
        weights["actorder"] = actorder
    return {"group_0": {"targets": ["Linear"], "weights": weights}}
