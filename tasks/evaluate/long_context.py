"""The long-context probe, at the context the model is served with (seed 003, step 4).

KV-cache quantization error adds up along the sequence: a variant that holds at the few hundred
tokens of everyday traffic can drift at 8k. Two measurements, baseline and variants through this
one code (a KV-FP8 variant's cache is quantized here as everywhere: our loader keeps it):

- perplexity on long public documents (the licence texts every Debian system ships in
  /usr/share/common-licenses, concatenated in a fixed order and cut into documents of `context`
  tokens), each document one forward pass, scored in blocks: every block is an item of the paired
  comparison, labelled with its position bucket, so the gate sees whether the loss grows with depth;
- passkey retrieval (Mohtashami & Jaggi, arXiv 2305.16300): a five-digit key planted at a given depth
  of a long filler, asked for at the end; greedy decoding, exact match.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from quantgate.tasks.evaluate.perplexity import (
    EvalResult,
    RequestNll,
    SlicePpl,
    aggregate_requests,
    count_kv_quantized_layers,
)
from quantgate.tasks.model.load import load_causal_lm, load_tokenizer

CORPUS_DIR = Path("/usr/share/common-licenses")
CORPUS = ("GPL-3", "LGPL-2.1", "GFDL-1.3", "MPL-2.0", "GPL-2", "Apache-2.0", "LGPL-2", "MPL-1.1", "GFDL-1.2")


@dataclass(frozen=True)
class LongContextResult:
    context: int
    perplexity: EvalResult  # one "request" per block: id doc<d>:<start>, slice pos=<bucket>
    passkeys: tuple[tuple[float, bool], ...]  # (depth, retrieved)
    seconds: float
    cpu_seconds: float

    @property
    def passkey_accuracy(self) -> float:
        return sum(hit for _, hit in self.passkeys) / len(self.passkeys) if self.passkeys else math.nan


def corpus_ids(tokenizer, needed: int) -> list[int]:
    paths = [CORPUS_DIR / name for name in CORPUS if (CORPUS_DIR / name).is_file()]
    texts = [p.read_text(encoding="utf-8") for p in paths]
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"] if texts else []
    if len(ids) < needed:
        raise ValueError(f"long_context: {CORPUS_DIR} holds {len(ids)} tokens of licence text, {needed} "
                         "needed (lower long_context.documents or context)")
    return ids


def _bucket(position: int) -> str:
    """pos=0-1k, 1k-2k, 2k-4k, 4k-8k, ...: the depth a block's tokens were read at."""
    low = 0 if position < 1024 else 2 ** int(math.log2(position // 1024)) * 1024
    return f"pos={low // 1024}k-{max(1, 2 * low // 1024)}k" if low else "pos=0-1k"


@torch.no_grad()
def block_nlls(model: torch.nn.Module, ids: list[int], block: int, doc: int) -> list[RequestNll]:
    """One forward over the document; the NLL of each next-token prediction, summed per block."""
    x = torch.tensor([ids])
    hidden = model.base_model(input_ids=x, use_cache=False).last_hidden_state[0, :-1]
    head, out = model.get_output_embeddings(), []
    for start in range(0, len(ids) - 1, block):  # the vocabulary projection a block at a time
        logits = head(hidden[start : start + block]).float()
        nll = F.cross_entropy(logits, x[0, start + 1 : start + 1 + block], reduction="sum")
        out.append(RequestNll(f"doc{doc}:{start}", float(nll), len(logits), (_bucket(start),)))
    return out


def passkey_prompt(tokenizer, filler: list[int], context: int, depth: float, key: str) -> list[int]:
    needle = tokenizer(f" The pass key is {key}. Remember it. {key} is the pass key. ",
                       add_special_tokens=False)["input_ids"]
    question = tokenizer("\n\nWhat is the pass key? The pass key is", add_special_tokens=False)["input_ids"]
    room = context - len(needle) - len(question) - 8  # eight tokens to answer in
    cut = int(room * depth)
    return filler[:cut] + needle + filler[cut:room] + question


@torch.no_grad()
def retrieved(model: torch.nn.Module, tokenizer, prompt: list[int], key: str) -> bool:
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return key in tokenizer.decode(out[0, len(prompt):], skip_special_tokens=True)


def run_long_context(checkpoint: str, out_path: str, *, context: int, documents: int, block: int,
                     depths: tuple[float, ...], dtype: str = "float32", seed: int = 0) -> LongContextResult:
    start, cpu = time.perf_counter(), time.process_time()
    tokenizer, model = load_tokenizer(checkpoint), load_causal_lm(checkpoint, dtype)
    ids = corpus_ids(tokenizer, documents * context)
    docs = [ids[d * context : (d + 1) * context] for d in range(documents)]
    blocks = [b for d, doc in enumerate(docs) for b in block_nlls(model, doc, block, d)]
    overall, slices = aggregate_requests(blocks)
    rng = random.Random(seed)
    keys = [f"{rng.randrange(10_000, 100_000)}" for _ in depths]
    filler = ids[len(ids) - context:]  # the corpus's end: text the perplexity documents may not hold
    hits = tuple((d, retrieved(model, tokenizer, passkey_prompt(tokenizer, filler, context, d, k), k))
                 for d, k in zip(depths, keys, strict=True))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    ppl = EvalResult(overall.ppl, overall.tokens, slices, count_kv_quantized_layers(model), seconds,
                     tuple(blocks), cpu_seconds)
    result = LongContextResult(context, ppl, hits, seconds, cpu_seconds)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_path).write_text(json.dumps(asdict(result), indent=1))
    return result


def read_long_context(path: str) -> LongContextResult:
    raw = json.loads(Path(path).read_text())
    p = raw["perplexity"]
    p["slices"] = {k: SlicePpl(**v) for k, v in p["slices"].items()}
    p["requests"] = tuple(RequestNll(**(q | {"slices": tuple(q["slices"])})) for q in p["requests"])
    raw["perplexity"] = EvalResult(**p)
    raw["passkeys"] = tuple(tuple(x) for x in raw["passkeys"])
    return LongContextResult(**raw)
