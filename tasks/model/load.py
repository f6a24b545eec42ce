"""Loading checkpoints for evaluation, the same way for the baseline and every variant, one dtype:
every format decoded to dense weights (quality, not speed; `fast_cpu.py` and `gpu.py` load for
speed), activation and KV-cache quantization kept where the format has them."""

from __future__ import annotations

from typing import Any

import torch

from quantgate.tasks.model.formats import checkpoint_format

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_causal_lm(path: str, dtype: str = "float32") -> torch.nn.Module:
    """Any checkpoint transformers reads (plain or compressed-tensors), in eval mode.

    Compressed-tensors weights are dequantized at load (`dequantize=True`) rather than by the
    hook that waits for the first forward of the top-level model: evaluation runs the decoder
    on its own. Activation and KV-cache quantization stay in place either way. Our 2-bit
    codebook formats (QuIP#, AQLM) are rebuilt by `load_codebook_model`, decoded once likewise."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    from quantgate.tasks.model.codebook_format import load_codebook_model

    kind = checkpoint_format(path).kind
    if kind in ("quip_sharp", "aqlm"):
        return load_codebook_model(path, DTYPES[dtype])
    kwargs = {"quantization_config": CompressedTensorsConfig(dequantize=True)} if kind != "dense" else {}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype], **kwargs)
    if kind != "dense":
        fast_fp8_inputs(model)  # same bits as compressed-tensors' QDQ, a fraction of its time
    model.eval()
    return model


def _is_fp8_token_dynamic(args: Any) -> bool:
    return (args is not None and args.type == "float" and args.num_bits == 8 and args.dynamic is True
            and args.strategy == "token" and args.symmetric)


def fast_fp8_inputs(model: torch.nn.Module) -> int:
    """Swap compressed-tensors' activation QDQ for our bit-identical `kernels.fp8_act` path on
    every decompressed Linear whose only on-the-fly quantization is FP8 dynamic per-token inputs;
    returns how many. Anything else (static or grouped inputs, output QDQ, weights still to
    fake-quantize) keeps compressed-tensors' own forward."""
    from compressed_tensors.quantization import QuantizationStatus

    from quantgate.kernels.fp8_act import Fp8InputQdq

    memo, swapped = Fp8InputQdq(), 0
    for module in model.modules():
        scheme = getattr(module, "quantization_scheme", None)
        status = getattr(module, "quantization_status", None)
        if (not isinstance(module, torch.nn.Linear) or scheme is None or status is None
                or status < QuantizationStatus.COMPRESSED or scheme.output_activations is not None
                or not _is_fp8_token_dynamic(scheme.input_activations)):
            continue
        module.forward = _fp8_input_forward(module, memo)
        swapped += 1
    return swapped


def _fp8_input_forward(module: torch.nn.Linear, memo: Any) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        if getattr(module, "quantization_enabled", True) and x.numel():
            x = memo(x)
        return torch.nn.functional.linear(x, module.weight, module.bias)

    return forward
