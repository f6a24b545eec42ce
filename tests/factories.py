"""Test inputs built here, no download: traffic records and a tiny Llama with its own tokenizer."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_TOPICS = {
    "code": ("Write a python function that returns the sum of a list.",
             "def total(xs):\n    return sum(xs)"),
    "math": ("Tom has 3 apples and buys 4 more. How many apples does he have?",
             "3 + 4 = 7. The answer is 7."),
    "support": ("My order has not arrived, can I get a refund?",
                "I am sorry about the delay. I have opened a refund request for your order."),
}


def cli_env(*, own_prefect: bool = False, **extra: str) -> dict[str, str]:
    """The environment a user's shell gives the CLI: none of the telemetry switches the CLI must set
    itself (conftest sets them for this process only), no tracking server, and the session's Prefect
    server as a team's shared one (PREFECT_API_URL): each CLI run then skips starting its own, ~20 s
    on 2 cores. `own_prefect`: the test is about the server the CLI starts and stops itself."""
    from quantgate.tasks.runtime.servers import QUIET_ENV

    drop = {"PREFECT_API_URL", "MLFLOW_TRACKING_URI", *QUIET_ENV}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if not own_prefect:
        env["PREFECT_API_URL"] = shared_prefect_api()
    return {**env, **extra}


_SHARED_PREFECT: list[tuple[subprocess.Popen, str]] = []


def shared_prefect_api() -> str:
    """The session's Prefect server, started on first use (conftest stops it at the end); a home of
    its own, not the in-process tests' Prefect home."""
    from quantgate.tasks.runtime.child_process import free_port
    from quantgate.tasks.runtime.servers import QUIET_ENV, start_prefect_server

    if _SHARED_PREFECT:
        return _SHARED_PREFECT[0][1]
    home = Path(os.environ["HOME"]).parent / "prefect-shared"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    with (home / "server.log").open("ab") as log:
        proc, api = start_prefect_server(free_port(), log, ui=False,
                                         env={**env, **QUIET_ENV, "PREFECT_HOME": str(home)}, timeout_s=120)
    _SHARED_PREFECT.append((proc, api))
    return api


def stop_shared_prefect() -> None:
    from quantgate.tasks.runtime.child_process import stop_child

    while _SHARED_PREFECT:
        stop_child(_SHARED_PREFECT.pop()[0], grace_s=20)


def record(i: int, *, tenant: str = "acme", domain: str = "code", lang: str = "en",
           prompt: str | None = None, answer: str | None = None, labels: bool = True) -> dict[str, Any]:
    p, a = _TOPICS.get(domain, _TOPICS["code"])
    rec: dict[str, Any] = {
        "id": f"r-{i:05d}", "ts": f"2026-11-28T10:{i // 60 % 60:02d}:{i % 60:02d}Z", "tenant": tenant,
        "request": {"model": "m", "messages": [{"role": "user", "content": prompt or f"{p} ({i})"}],
                    "max_tokens": 64},
        "response": {"choices": [{"message": {"role": "assistant", "content": answer or a}}]},
        "latency_ms": 100,
    }
    if labels:
        rec["labels"] = {"domain": domain, "lang": lang}
    return rec


def write_traffic(path: Path, records: list[dict[str, Any]], extra_lines: list[bytes] = ()) -> Path:
    with path.open("wb") as f:
        for r in records:
            f.write(json.dumps(r).encode() + b"\n")
        for line in extra_lines:
            f.write(line + b"\n")
    return path


def heldout_traffic(d: Path, n: int):
    """A prepared held-out set of `n` mixed requests (no calibration set), for evaluation tests."""
    from quantgate.tasks.traffic.load import load_traffic, write_requests
    from quantgate.tasks.traffic.prepare import PreparedTraffic

    reqs = load_traffic(write_traffic(d / "t.jsonl", mixed_records(n)), max_line_bytes=65536,
                        length_buckets=(200,)).requests
    write_requests(d / "heldout.jsonl", reqs)
    return PreparedTraffic("", str(d / "heldout.jsonl"), "", "", "h", n, 0, 0, n, {})


def mixed_records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    tenants, domains = ("acme", "globex", "initech"), tuple(_TOPICS)
    return [record(i, tenant=rng.choice(tenants), domain=rng.choice(domains)) for i in range(n)]


def tiny_llama(path: Path, *, hidden: int = 64, layers: int = 2, heads: int = 2, kv_heads: int = 1,
               seed: int = 0) -> Path:
    """A randomly initialised Llama (hidden 64, 2 layers) with a BPE tokenizer trained here. Head size
    32: the smallest the serving engine's CPU attention has kernels for (vLLM: 32, 64, 80, ...)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    corpus = [t for pair in _TOPICS.values() for t in pair] * 4 + [
        "The quick brown fox jumps over the lazy dog. 0123456789 {}[]():,.\"'"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=512, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def calibration_file(d: Path) -> Path:
    """A calibration JSONL of 8 requests drawn by our own sampler from mixed traffic."""
    from quantgate.tasks.traffic.load import load_traffic, write_requests
    from quantgate.tasks.traffic.sampling import stratified_split

    reqs = load_traffic(write_traffic(d / "t.jsonl", mixed_records(40)), max_line_bytes=65536,
                        length_buckets=(200,)).requests
    path = d / "cal.jsonl"
    write_requests(path, stratified_split(reqs, calibration_size=8, heldout_size=8, seed=0).calibration)
    return path


# ---- PII: independent, deliberately simple detectors (not the redactor's own patterns)
SURVIVORS = {
    "email": re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    "api_key": re.compile(r"sk-[A-Za-z0-9]{16,}|AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{30,}"),
    "ip": re.compile(r"\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b"),
    "phone": re.compile(
        r"\+\d{1,3}(?: \d{1,4}){2,5}|\(\d{3}\) ?\d{3}-\d{4}"
        r"|\b\d{3}-\d{3}-\d{4}\b|\b0\d(?: \d\d){4}\b"
    ),
}
CARD_CANDIDATE = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")

def luhn(digits: str) -> bool:  # an independent oracle: deliberately not the module's own
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def pii_hits(text: str) -> list[tuple[str, str]]:
    hits = [(kind, m) for kind, pat in SURVIVORS.items() for m in pat.findall(text)]
    for m in CARD_CANDIDATE.finditer(text):
        if luhn(re.sub(r"\D", "", m.group(0))):
            hits.append(("card", m.group(0)))
    return hits




def planted_pii(log: Path) -> set[str]:
    """Every PII value the detectors find in a traffic log's raw lines: what must not reappear."""
    text = log.read_bytes().decode("utf-8", errors="replace")
    return {hit for _, hit in pii_hits(text)}


def perturbed_copy(model_dir: str, out: Path, scale: float, seed: int = 0) -> Path:
    """A copy of a tiny model with Gaussian noise (`scale`) on every decoder-layer weight: a variant
    whose divergence from the original is known to be there."""
    import torch

    from quantgate.tasks.model.load import load_causal_lm, load_tokenizer

    model = load_causal_lm(model_dir)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.model.layers.parameters():
            p.add_(scale * torch.randn_like(p))
    model.save_pretrained(out)
    load_tokenizer(model_dir).save_pretrained(out)
    return out


# Service-time tolerances for tests whose canary is the champion's copy: at 5 samples a side the
# p95 ratio of identical models swings to 1.65 on a quiet 2-core machine, and a loaded CI one goes
# further; injected latency reads 15x, so 2x still fails it at once.
ROOMY = {"latency_tolerance": 2.0, "tpot_tolerance": 2.0, "energy_tolerance": 2.0}
# For tests of the gate-to-rollout mechanics whose canary is the tiny model's INT8 W8A8: its speed
# against the champion is the CPU's business (vLLM's per-token activation quantization dominates a
# 64-wide model): p95 latency x3.2 against a bf16 champion on an AVX-512 EPYC (Zen 4), within x2 on
# AVX2 against fp32. A canary that is truly slower is the rollback tests' subject, not these.
MECHANICS = {"latency_tolerance": 10.0, "tpot_tolerance": 10.0, "energy_tolerance": 10.0}


def rollout_state(tmp: Path, baseline: str, variants: dict[str, tuple[str, str]], *,
                  rollout: dict[str, Any] | None = None, port: int | None = None) -> Path:
    """A state dir as a finished `quantgate run` leaves it for the canary, built without running the
    pipeline: MLflow (SQLite) with the baseline registered as `champion` and each variant
    (name -> (checkpoint, gate verdict)) as a version, the run record, held-out traffic. Returns the
    config YAML that points at it (tiny windows: the tests' rollouts take seconds per step)."""
    import uuid

    import yaml
    from mlflow.tracking import MlflowClient

    from quantgate.tasks.registry.aliases import register_version
    from quantgate.tasks.registry.champion import ensure_champion
    from quantgate.tasks.runtime.child_process import free_port
    from quantgate.tasks.traffic.load import load_traffic, write_requests

    state = tmp / "state"
    state.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=f"sqlite:///{state / 'mlflow.db'}")
    exp = client.create_experiment("tiny", artifact_location=(state / "mlartifacts").resolve().as_uri())
    parent = client.create_run(exp, run_name="quantize_and_gate").info.run_id
    base_run = client.create_run(exp, run_name="baseline", tags={"mlflow.parentRunId": parent}).info.run_id
    ensure_champion(client, "tiny", base_run, baseline)
    registered = {}
    for name, (path, verdict) in variants.items():
        rid = client.create_run(exp, run_name=name, tags={"mlflow.parentRunId": parent}).info.run_id
        registered[name] = register_version(client, "tiny", rid, path)
        client.set_model_version_tag("tiny", registered[name], "variant", name)
        client.set_model_version_tag("tiny", registered[name], "gate.verdict", verdict)
    reqs = load_traffic(write_traffic(tmp / "traffic.jsonl", mixed_records(24)), max_line_bytes=65536,
                        length_buckets=(200,)).requests
    write_requests(state / "heldout.jsonl", reqs)
    flow_run_id = str(uuid.uuid4())
    (state / "runs" / flow_run_id).mkdir(parents=True)
    record = {"flow_run_id": flow_run_id, "model": {"name": "tiny", "path": baseline, "digest": "x"},
              "heldout_path": str(state / "heldout.jsonl"),
              "checkpoints": {n: p for n, (p, _) in variants.items()}, "winner": next(iter(variants)),
              "mlflow": {"parent_run_id": parent, "registered": registered, "experiment_id": exp}}
    (state / "runs" / flow_run_id / "run_record.json").write_text(json.dumps(record))
    (state / "runs" / "LATEST").write_text(flow_run_id)
    conf = {"model": {"name": "smollm2-135m-instruct", "served_name": "tiny"},
            "variants": [{"name": "x", "method": "int4_rtn"}],
            "judge": {"enabled": False},
            "rollout": {"steps": [25, 50, 100], "window_canary_requests": 4, "window_max_requests": 48,
                        "pause_timeout_s": 20, "replay_max_tokens": 6,
                        "analysis": {"min_error_samples": 8, "judge_min_pairs": 3, **ROOMY},
                        "serving": {"port": port or free_port(), "replica_cpus": 0.25}, **(rollout or {})},
            "runtime": {"state_dir": str(state), "prefect_port": free_port(), "experiment": "tiny"}}
    path = tmp / "rollout.yaml"
    path.write_text(yaml.safe_dump(conf))
    return path
