"""scripts/make_demo_traffic.py, run with its defaults, reproduces the committed demo traffic log byte for
byte, so editing the template bank (scripts/demo_traffic_templates.json) without regenerating fails here."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.timeout(300)
def test_generator_reproduces_the_committed_log(tmp_path):
    out = tmp_path / "demo.jsonl"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_traffic.py"), "--out", str(out)],
                   cwd=tmp_path, check=True, capture_output=True, timeout=280)
    assert out.read_bytes() == (ROOT / "conf" / "traffic" / "demo.jsonl").read_bytes()
