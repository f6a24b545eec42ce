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
def test_install_exposes_only_the_quantgate_namespace(name, tmp_path):
    # From a neutral directory (no repo root on sys.path) only `quantgate.<name>` imports.
    bare = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert "ModuleNotFoundError" in bare.stderr
    ok = subprocess.run([sys.executable, "-c", f"import quantgate.{name}"], cwd=tmp_path)
    assert ok.returncode == 0


def test_repo_kernels_folder_is_not_mistaken_for_the_kernels_package():
    # Ray workers and `python -m` put the working directory on sys.path; transformers then
    # finds our folder under the name `kernels`. It must not take it for the hub package.
    code = "from transformers.utils import is_kernels_available as a; print(a())"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.stdout.strip() == "False", run.stderr[-2000:]
