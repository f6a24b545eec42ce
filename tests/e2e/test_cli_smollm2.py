"""The CLI on the real SmolLM2-135M-Instruct and the shipped demo traffic, as a user runs it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from quantgate.conf.load import load_config

pytestmark = pytest.mark.e2e

PII = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|\bsk-[A-Za-z0-9]{20,}|\bAKIA[0-9A-Z]{16}|\b4111[ -]?1111")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    conf = {
        "traffic": {"path": str(load_config().traffic.path), "calibration_size": 8,
                    "heldout_size": 30},
        "calibration": {"max_seq_len": 128},
        "eval": {"window": 256, "batch_size": 8, "min_slice_tokens": 100},
        "variants": [
            {"name": "fp8_w8a8", "method": "fp8_w8a8"},
            {"name": "kv_fp8", "method": "kv_fp8", "num_samples": 4},
            {"name": "int4_rtn", "method": "int4_rtn", "group_size": 64, "control": True},
            {"name": "int4_g128", "method": "int4_rtn", "group_size": 128},
        ],
        "lmeval": {"limit": 12, "replay_size": 12, "min_slice_items": 4},
        "judge": {"max_pairs": 3},
        "bench": {"batch_sizes": [1, 4], "prompt_tokens": 16, "new_tokens": 4, "repeats": 1},
        "runtime": {"state_dir": str(tmp / "state"), "prefect_port": 4293},
    }
    path = tmp / "e2e.yaml"
    path.write_text(yaml.safe_dump(conf))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp / 'tracking.db'}"  # the env var is honoured
    exe = Path(sys.executable).parent / "quantgate"
    proc = subprocess.run([str(exe), "run", "--config", str(path)], capture_output=True, text=True,
                          env=env, timeout=1500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return tmp, proc.stdout, path, env


def test_table_shows_every_variant_and_the_failure(run):
    _, out, _, _ = run
    assert re.search(r"\| baseline \| \d+\.\d+ \| 1\.000 \|", out)
    for name in ("fp8_w8a8", "kv_fp8", "int4_rtn"):
        assert re.search(rf"\| {name} \| \d+\.\d+ \| \d\.\d+ \|", out), name
    assert "variants[int4_g128].group_size=128 does not divide in_features=576" in out


def test_mlflow_has_runs_slice_metrics_and_canary(run):
    tmp, _, _, _ = run
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'tracking.db'}")
    exp = client.get_experiment_by_name("smollm2-135m-instruct")
    runs = client.search_runs([exp.experiment_id])
    children = {r.data.tags["variant"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    assert set(children) == {"baseline", "fp8_w8a8", "kv_fp8", "int4_rtn", "int4_g128"}
    assert children["int4_g128"].info.status == "FAILED"
    base = children["baseline"].data.metrics
    slice_keys = [k for k in base if k.startswith("ppl.")]
    assert any(k.startswith("ppl.domain.") for k in slice_keys)
    assert any(k.startswith("ppl.tenant.") for k in slice_keys)
    assert any(k.startswith("ppl.lang.") for k in slice_keys)
    fp8 = children["fp8_w8a8"].data.metrics
    # FP8 keeps a 135M model within a few percent; INT4 RTN loses clearly more.
    assert 0.9 < fp8["recovery.ppl"] <= 1.02
    assert children["int4_rtn"].data.metrics["recovery.ppl"] < fp8["recovery.ppl"]
    assert children["kv_fp8"].data.metrics["eval.kv_cache_quantized_layers"] == 30
    # Task evals and the judge ran on the real model; the baseline answers some items right.
    assert base["lmeval.qg_facts_mc.acc"] > 0.25  # above chance for 4 choices
    assert "recovery.lmeval.qg_facts_mc.acc" in fp8 and fp8["judge.pairs"] == 3
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    winner = parent.data.tags["gate.winner"]
    if winner != "none":
        mv = client.get_model_version_by_alias("smollm2-135m-instruct", "canary")
        assert mv.tags["variant"] == winner


def test_quarantine_file_lists_bad_lines_without_pii(run):
    tmp, out, _, _ = run
    path = Path(re.search(r"quarantine: (\S+)", out).group(1))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) >= 10
    assert all(isinstance(r["line"], int) and r["reason"] for r in rows)
    assert not PII.search(path.read_text())


def test_bench_cli_measures_the_run_checkpoints_side_by_side(run):
    """`quantgate bench` finds the run's checkpoints itself; INT4 runs its packed-int4 CPU path."""
    tmp, _, conf, env = run
    out_json = tmp / "bench.json"
    exe = Path(sys.executable).parent / "quantgate"
    proc = subprocess.run([str(exe), "bench", "--config", str(conf), "--batch", "1", "--repeats", "1",
                           "--out", str(out_json)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    data = json.loads(out_json.read_text())
    assert set(data["models"]) == {"baseline", "baseline_bf16", "fp8_w8a8", "kv_fp8", "int4_rtn"}
    assert data["energy_method"] == "estimated" and data["batch_sizes"] == [1]
    assert "int4" in data["models"]["int4_rtn"]["path"] and "no FP8" in data["models"]["fp8_w8a8"]["path"]
    # INT4 reads ~4x fewer weight bytes than bf16: it must at least beat the fp32 baseline.
    assert data["speedup_vs_baseline"]["int4_rtn"]["1"] > 1.0
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("smollm2-135m-instruct")
    query = "tags.`bench.batch` = '1' and tags.variant = 'int4_rtn'"
    bench_runs = client.search_runs([exp.experiment_id], query)
    assert bench_runs and bench_runs[0].data.metrics["energy.j_per_token"] > 0
