"""The prepared GPU scripts still run: GPU time is lent rarely and briefly, so their `--device cpu`
dry runs (the same code, the CPU fast path standing in for Triton) are held here, end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _run(script: str, *args: str, cwd: Path) -> None:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--device", "cpu", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.timeout(480)
def test_gpu_twobit_dry_run_quantizes_both_methods_and_benches_them(tmp_path):
    out = tmp_path / "out"
    state = str(tmp_path / "state")
    _run("gpu_twobit.py", "--smoke", "--budget", "4", "--out", str(out), "--state-dir", state, cwd=tmp_path)
    result = json.loads((out / "gpu_twobit.json").read_text())
    assert math.isfinite(result["baseline_ppl"]) and result["baseline_ppl"] > 1
    for method, layer in (("quip_sharp_2bit", "QuipLinear"), ("aqlm_2x8", "AqlmLinear")):
        assert "error" not in result[method], result[method]
        assert math.isfinite(result[method]["ppl"]) and result[method]["ppl"] > 1
        parity = result[method]["kernel_vs_reference"]
        assert set(parity) == {f"{layer}@1", f"{layer}@32"} and max(parity.values()) < 1e-5
    bench = json.loads((out / "decode_bench.json").read_text())
    assert {"baseline", "quip_sharp_2bit", "aqlm_2x8"} <= set(bench["models"])


@pytest.mark.timeout(300)
def test_gpu_layers_and_kernels_dry_runs(tmp_path):
    layers = str(tmp_path / "layers.json")
    _run("gpu_layers.py", "--layers", "1", "--repeats", "1", "--new-tokens", "4", "--out", layers,
         cwd=tmp_path)
    rows = json.loads((tmp_path / "layers.json").read_text())["rows"]
    kinds = ("dense", "quip", "quip", "aqlm", "aqlm_rht")
    assert [(r["model"], r["batch"]) for r in rows] == [(m, b) for m in kinds for b in (1, 32)]
    assert all(r["tpot_ms"] > 0 for r in rows)
    _run("gpu_kernels.py", "--reps", "2", "--out", str(tmp_path / "kernels.json"), cwd=tmp_path)
    sweep = json.loads((tmp_path / "kernels.json").read_text())
    assert {(r["method"], r["tokens"]) for r in sweep} == {(m, t) for m in ("quip", "aqlm") for t in (1, 32)}
    assert max(r["rel_err_vs_reference"] for r in sweep) < 1e-5
