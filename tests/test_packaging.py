"""The wheel carries the `quantgate.*` namespace, the embedded profiles and the demo traffic,
and no top-level `kernels`/`tasks`/`flows`/`conf` package."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_wheel_contents(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("quantgate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("quantgate/__init__.py", "quantgate/py.typed",
                     "quantgate/kernels/activation_stats.py", "quantgate/tasks/quantize/registry.py",
                     "quantgate/flows/quantize_and_gate.py", "quantgate/conf/default.yaml",
                     "quantgate/conf/cluster.yaml", "quantgate/conf/hardware.yaml",
                     "quantgate/conf/traffic/demo.jsonl",
                     "quantgate/conf/evals/suite.py", "quantgate/conf/evals/tasks/qg_arith/qg_arith.yaml",
                     "quantgate/conf/evals/tasks/qg_arith/data.jsonl",
                     "quantgate/conf/evals/tasks/qg_replay/utils.py"):
        assert required in names, required
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"quantgate"}, tops
