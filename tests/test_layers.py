"""The one-way layering of DESIGN.md, read from the source: kernels <- tasks <- flows."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FORBIDDEN = {
    "kernels": {"prefect", "prefect_ray", "ray", "mlflow", "quantgate.tasks", "quantgate.flows"},
    "tasks": {"quantgate.flows"},
    "flows": {"torch", "transformers", "llmcompressor", "quantgate.kernels"},
    "conf": {"torch", "prefect", "ray", "mlflow", "quantgate.tasks", "quantgate.flows",
             "quantgate.kernels"},
}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer):
    bad = [
        f"{py.relative_to(ROOT)}: {mod}"
        for py in (ROOT / layer).rglob("*.py")
        for mod in _imports(py)
        if any(mod == f or mod.startswith(f + ".") for f in FORBIDDEN[layer])
    ]
    assert not bad, bad


@pytest.mark.parametrize("name", ["kernels", "tasks", "flows", "conf"])
def test_bare_folder_names_are_not_importable(name):
    # Even with the repo root first on sys.path (python -c from the root does that).
    code = f"import {name}"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode != 0
    assert "ImportError" in run.stderr or "ModuleNotFoundError" in run.stderr
    ok = subprocess.run([sys.executable, "-c", f"import quantgate.{name}"], cwd=ROOT)
    assert ok.returncode == 0
