"""A method's implementation is the module named like it: `quantgate.tasks.quantize.methods.<method>`,
for every method `conf.methods.SPECS` lists. Two kinds:

- llm-compressor recipes: `build_recipe(spec) -> list[modifier]`, optional `runtime_patches()`;
- our own methods (QuIP#, AQLM): `layer_functions(spec)`, run by the layer loops of
  `codebook.blockwise` and `codebook.layers`;
- plain conversions saved as dense checkpoints (the bf16 control): `convert(spec, model) -> model`.

Every kind sets `NEEDS_CALIBRATION`. Nothing to register here: adding a method is its spec class,
its line in `SPECS` and its module."""

from __future__ import annotations

import importlib
from types import ModuleType

from quantgate.conf.methods import METHOD_NAMES

METHODS_PACKAGE = "quantgate.tasks.quantize.methods"


def quantizer_for(method: str) -> ModuleType:
    if method not in METHOD_NAMES:
        raise KeyError(f"method: unknown {method!r}; known: {', '.join(METHOD_NAMES)}")
    module = importlib.import_module(f"{METHODS_PACKAGE}.{method}")
    kinds = ("build_recipe", "layer_functions", "convert")
    if not hasattr(module, "NEEDS_CALIBRATION") or not any(hasattr(module, k) for k in kinds):
        raise TypeError(f"{module.__name__}: a method module needs NEEDS_CALIBRATION and build_recipe, "
                        "layer_functions or convert")
    return module


def is_own_method(method: str) -> bool:
    """Our own layer loop (codebook formats), not an llm-compressor recipe."""
    return hasattr(quantizer_for(method), "layer_functions")
