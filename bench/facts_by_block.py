"""Which decoder blocks hold what a 2-bit model forgets: multiple-choice facts (`qg_facts_mc`) per
category with each block of a 2-bit checkpoint put back to the baseline's, one at a time.

Scored as the lm-eval task scores it (log-likelihood of each choice as the assistant's turn after
the chat header; accuracy), in one process, so a block's row is its gain over the 2-bit model:

    .venv/bin/python bench/facts_by_block.py --state-dir /tmp/qgstate /tmp/bt/quip_3600

`--layers-of 0 5` puts back each Linear of blocks 0 and 5 alone instead (which layers a
mixed-precision variant would keep in 16 bits). `--layer-types down_proj up_proj` puts back one
projection in every block at once, each type alone and then all named together: the most that
storing that type at more bits could bring (a QuIP# checkpoint only: AQLM folds its input scaling
into the RMSNorm and up_proj, so a baseline Linear no longer fits its neighbours there).
"""

from __future__ import annotations

import argparse
import copy
import json
from collections import Counter
from pathlib import Path

import torch

from quantgate.conf.load import load_config
from quantgate.tasks.model.codebook_format import load_codebook_model
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.model.source import resolve_model

DATA = Path(__file__).resolve().parents[1] / "conf" / "evals" / "tasks" / "qg_facts_mc" / "data.jsonl"


def encoded_items(tokenizer) -> list[tuple[str, list[int], list[list[int]], int]]:
    """(category, prompt ids, each choice's ids, label) as the task's yaml writes the prompt."""
    items = []
    for line in DATA.read_text().splitlines():
        doc = json.loads(line)
        text = f"{doc['question']}\nAnswer with the correct choice."
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                               add_generation_prompt=True)
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        choices = [tokenizer(prompt + c, add_special_tokens=False)["input_ids"][len(ids):]
                   for c in doc["choices"]]
        items.append((doc["category"], ids, choices, doc["label"]))
    return items


@torch.no_grad()
def correct_by_category(model, items) -> Counter:
    right: Counter = Counter()
    for category, prompt, choices, label in items:
        scores = []
        for choice in choices:
            ids = torch.tensor([prompt + choice])
            logp = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float().log_softmax(-1)
            scores.append(float(logp.gather(1, torch.tensor(choice)[:, None]).sum()))
        right[category] += int(max(range(len(scores)), key=scores.__getitem__) == label)
    return right


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="a 2-bit checkpoint (quip_sharp_2bit or aqlm_2x8)")
    ap.add_argument("--state-dir", type=Path, default=Path(".quantgate"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers-of", type=int, nargs="*", default=None, metavar="BLOCK",
                    help="put back each Linear of these blocks alone, not whole blocks")
    ap.add_argument("--layer-types", nargs="*", default=None, metavar="PROJ",
                    help="put back this projection (e.g. down_proj) in every block at once")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    conf = load_config(None)
    model_path = resolve_model(conf.model.name, args.state_dir / "models").path
    items = encoded_items(load_tokenizer(model_path))
    totals = Counter(category for category, *_ in items)
    baseline = load_causal_lm(model_path).eval()
    quantized = load_codebook_model(args.checkpoint).eval()

    def row(name: str, model) -> None:
        right = correct_by_category(model, items)
        print(json.dumps({"model": name, "correct": sum(right.values()), "of": len(items),
                          **{c: f"{right[c]}/{totals[c]}" for c in totals}}), flush=True)

    row("baseline", baseline)
    row("2-bit", quantized)
    def row_with_put_back(name: str, wheres: list[str]) -> None:
        """Score with these submodules back to the baseline's, then put the 2-bit ones back."""
        kept = {w: quantized.get_submodule(w) for w in wheres}
        for w in wheres:
            quantized.set_submodule(w, copy.deepcopy(baseline.get_submodule(w)))
        row(name, quantized)
        for w, module in kept.items():
            quantized.set_submodule(w, module)

    linears = [f"model.layers.{i}.{name}" for i, block in enumerate(baseline.model.layers)
               for name, m in block.named_modules() if isinstance(m, torch.nn.Linear)]
    if args.layers_of is not None:
        for where in linears:
            if int(where.split(".")[2]) in args.layers_of:
                row_with_put_back(f"2-bit, {where} baseline", [where])
        return
    if args.layer_types:
        sets = [[t] for t in args.layer_types] + ([args.layer_types] if len(args.layer_types) > 1 else [])
        for types in sets:
            wheres = [w for w in linears if w.rsplit(".", 1)[-1] in types]
            row_with_put_back(f"2-bit, every {' + '.join(types)} baseline ({len(wheres)} Linears)", wheres)
        return
    blocks = quantized.model.layers
    for i in range(len(blocks)):
        kept = blocks[i]
        blocks[i] = copy.deepcopy(baseline.model.layers[i])  # this block back to the baseline's
        row(f"2-bit, block {i} baseline", quantized)
        blocks[i] = kept


if __name__ == "__main__":
    main()
