"""End-to-end fine-tuning of a 2-bit model's continuous parameters against the baseline.

Minimizes KL(p_baseline ‖ p_quantized) of the next-token distributions over the calibration
tokens, with the codes frozen. Trained: QuIP#'s sign vectors S_U, S_V (relaxed to real
scales) and Wscale (both stages' with a residual); AQLM's codebooks and row scales; every RMSNorm
weight. The embedding
(tied to lm_head) stays fixed. QuIP# (arXiv 2402.04396) §5 and AQLM (arXiv 2401.06118) §3.3
fine-tune the same kind of parameters the same way; this is their end-to-end step only. With
`code_fraction` > 0 the codes move too (PV-tuning's V step, `code_updates`).

A few calibration sequences are held out: the result is the parameter set with the lowest
held-out KL seen (the input one included), so tuning can only help on that measure, and it
ends by the deadline, its last held-out check included. `extra` sequences (the baseline's own
text, `synthetic`) train beside the calibration ones and are never held out: the check stays on
the traffic.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from quantgate.kernels.codebook_linear import AqlmLinear, QuipLinear
from quantgate.tasks.quantize.codebook.code_updates import CodeUpdates


@dataclass(frozen=True)
class FinetuneReport:
    kl_before: float  # held-out mean KL per token, nats
    kl_after: float
    steps: int
    epochs: int
    stopped_by: str  # "epochs" | "deadline"
    codes_changed: int = 0  # code groups moved by the V step over all steps (kept or not)


def tunable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Turn the codebook layers' continuous tensors and the norms into trainable parameters."""
    params: list[torch.nn.Parameter] = []
    for module in model.modules():
        if isinstance(module, QuipLinear):
            scales = ("Wscale", "Wscale_residual") if module.residual else ("Wscale",)
            for name in ("SU", "SV", *scales):  # buffers -> parameters (same state-dict keys)
                setattr(module, name, torch.nn.Parameter(getattr(module, name).float()))
                params.append(getattr(module, name))
        elif isinstance(module, AqlmLinear):
            params += [module.codebooks, module.scales]
        elif type(module).__name__.endswith("RMSNorm"):
            params.append(module.weight)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    return params


def split_signs(module: torch.nn.Module, params: list[torch.nn.Parameter]
                ) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """(QuIP#'s sign vectors S_U and S_V, the rest of `params`): the signs are relaxed ±1 entries,
    which at a weight's Adam rate hardly move, so they take their own (the QuIP# reference: 10×)."""
    signs = [getattr(m, name) for m in module.modules() if isinstance(m, QuipLinear) for name in ("SU", "SV")]
    sign_ids = {id(p) for p in signs}
    return signs, [p for p in params if id(p) not in sign_ids]


def interleave(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Both lists in one, spread evenly (each accumulated step sees both kinds, in their own order)."""
    keyed = [((i + 0.5) / len(first), 0, t) for i, t in enumerate(first)]
    keyed += [((i + 0.5) / len(second), 1, t) for i, t in enumerate(second)]
    return [t for *_, t in sorted(keyed, key=lambda k: k[:2])]


def _kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of KL(teacher ‖ student)."""
    t = F.log_softmax(teacher_logits.float(), -1)
    s = F.log_softmax(student_logits.float(), -1)
    return (t.exp() * (t - s)).sum(-1).mean()


@torch.no_grad()
def _heldout_kl(student: torch.nn.Module, teacher: torch.nn.Module, batches: Sequence[torch.Tensor]) -> float:
    layers = [m for m in student.modules() if isinstance(m, AqlmLinear | QuipLinear)]
    for module in layers:  # decoded once for all the check's forwards
        module.materialize()
    total = 0.0
    for ids in batches:
        total += float(_kl(student(input_ids=ids).logits, teacher(input_ids=ids).logits))
    for module in layers:
        module.dense = None
    return total / max(len(batches), 1)


def finetune_end_to_end(
    student: torch.nn.Module, teacher: torch.nn.Module, batches: Sequence[torch.Tensor], *,
    deadline: float, epochs: int = 2, lr: float = 5e-4, heldout: int = 8, accumulate: int = 4,
    code_lr: float = 0.0, code_fraction: float = 0.0, sign_lr: float | None = None,
    extra: Sequence[torch.Tensor] = (),
) -> FinetuneReport:
    heldout = min(heldout, len(batches) // 4)  # a quarter at most: most sequences train
    train, val = interleave(batches[heldout:], extra), list(batches[:heldout])
    params = tunable_parameters(student)
    codebook_layers = [m for m in student.modules() if isinstance(m, AqlmLinear | QuipLinear)]
    codes = CodeUpdates(codebook_layers, code_lr, code_fraction) if code_fraction > 0 else None
    kept = params + ([m.code_tensor() for m in codebook_layers] if codes else [])  # the best state's
    best_state = [p.detach().clone() for p in kept]
    started = time.monotonic()
    best = before = _heldout_kl(student, teacher, val)
    # Training stops early enough for the held-out check that follows it to end by the deadline:
    # that check costs what this one did (measured: tens of seconds on one core, past the budget).
    train_until = deadline - (time.monotonic() - started)
    signs, others = split_signs(student, params)
    optimizer = torch.optim.Adam([{"params": others, "lr": lr},
                                  {"params": signs, "lr": lr if sign_lr is None else sign_lr}])
    steps, done_epochs, stopped_by = 0, 0, "epochs"
    teacher.eval()
    for _ in range(epochs):
        student.train()
        stepped_before = steps
        for first in range(0, len(train), accumulate):
            if time.monotonic() > train_until:
                stopped_by = "deadline"
                break
            for module in codebook_layers:  # one differentiable decode per step, shared by its sequences
                module.dense = module.tuning_weight()
            if codes:
                codes.track()
            chunk = train[first : first + accumulate]
            loss = 0.0
            for ids in chunk:
                with torch.no_grad():
                    target = teacher(input_ids=ids).logits
                loss = loss + _kl(student(input_ids=ids).logits, target)
            (loss / len(chunk)).backward()
            optimizer.step()
            if codes:
                codes.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
        for module in codebook_layers:
            module.dense = None
        student.eval()
        optimizer.zero_grad(set_to_none=True)
        if steps > stepped_before:  # parameters moved: worth a held-out check (else nothing changed)
            kl = _heldout_kl(student, teacher, val)
            if kl < best:
                best, best_state = kl, [p.detach().clone() for p in kept]
        done_epochs += 1
        if stopped_by == "deadline":
            break
    with torch.no_grad():
        for p, saved in zip(kept, best_state, strict=True):
            p.copy_(saved)
            p.requires_grad_(False)
    return FinetuneReport(before, best, steps, done_epochs, stopped_by, codes.changed if codes else 0)


def finetune_checkpoint(path: str, teacher: torch.nn.Module, batches: Sequence[torch.Tensor], *,
                        deadline: float, epochs: int, lr: float, code_lr: float = 0.0,
                        code_fraction: float = 0.0, sign_lr: float | None = None, heldout: int = 8,
                        accumulate: int = 4, extra: Sequence[torch.Tensor] = ()) -> FinetuneReport:
    """Tune a saved codebook checkpoint in place: the tuned tensors (codes included when they move)
    replace the stored ones, in the stored dtypes (S_U, S_V stay fp16)."""
    from safetensors.torch import load_file, save_file

    from quantgate.tasks.model.codebook_format import load_codebook_model

    device = next(teacher.parameters()).device  # the GPU when the variant asked for one
    student = load_codebook_model(path, materialize=False).to(device)
    batches, extra = [ids.to(device) for ids in batches], [ids.to(device) for ids in extra]
    report = finetune_end_to_end(student, teacher, batches, deadline=deadline, epochs=epochs, lr=lr,
                                 code_lr=code_lr, code_fraction=code_fraction, sign_lr=sign_lr,
                                 heldout=heldout, accumulate=accumulate, extra=extra)
    file = f"{path}/model.safetensors"
    stored = load_file(file)
    tuned = student.state_dict()
    for key, value in stored.items():
        if key in tuned:
            stored[key] = tuned[key].detach().cpu().to(value.dtype).contiguous()
    save_file(stored, file, metadata={"format": "pt"})
    return report
