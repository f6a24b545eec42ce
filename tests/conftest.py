"""Shared fixtures. Every process a test starts writes under a temp dir, never $HOME."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for `factories`

_SESSION_HOME = Path(os.environ.get("QG_TEST_HOME", "/tmp/quantgate-tests"))
for key, sub in {"HOME": "home", "PREFECT_HOME": "prefect", "HF_HOME": "hf", "RAY_TMPDIR": "ray"}.items():
    os.environ[key] = str(_SESSION_HOME / sub)
    (_SESSION_HOME / sub).mkdir(parents=True, exist_ok=True)
# Telemetry off for what the tests run in this process (Ray, MLflow, Prefect's harness). The CLI
# must set it for itself: `factories.cli_env()` strips these variables from every CLI a test starts,
# and tests/flows/test_stop.py checks the servers it starts got them anyway.
for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "DO_NOT_TRACK": "true",
                   "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_USAGE_STATS_ENABLED": "0",
                   "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "TOKENIZERS_PARALLELISM": "false"
                   }.items():
    os.environ.setdefault(key, value)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    from factories import tiny_llama

    return str(tiny_llama(tmp_path_factory.mktemp("tiny") / "model"))


def pytest_sessionfinish(session, exitstatus):
    from factories import stop_shared_prefect

    stop_shared_prefect()


def pytest_terminal_summary(terminalreporter):
    """The browser test's screenshots, by path: CI's output says where to look."""
    from browser import TAKEN

    if TAKEN:
        terminalreporter.write_sep("-", "screenshots of the Prefect and MLflow UIs")
        for path in TAKEN:
            terminalreporter.write_line(str(path))
