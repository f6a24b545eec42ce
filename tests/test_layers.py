"""The one-way layering of DESIGN.md (kernels <- tasks <- flows), and the `quantgate.*` namespace."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FOLDERS = ("kernels", "tasks", "flows", "conf")


def test_import_contracts_hold(tmp_path):
    """The import-linter contracts in pyproject.toml: the layers of DESIGN.md, what each layer may
    not import, and no cycles between sibling packages or modules. import-linter reads packages from
    the file system, and ours are mapped onto `quantgate.*` by pyproject.toml, so it runs on a copy
    laid out as the wheel is."""
    tree = tmp_path / "quantgate"
    shutil.copytree(ROOT / "quantgate", tree, ignore=shutil.ignore_patterns("__pycache__"))
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    linter = Path(sys.executable).parent / "lint-imports"
    run = subprocess.run([str(linter), "--no-cache", "--no-logo"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize("name", FOLDERS)
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
