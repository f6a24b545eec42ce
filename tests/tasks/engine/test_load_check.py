"""Several checkpoints asked of one engine process (the format probe's engine side): a process killed
mid-checkpoint is the machine's trouble for that one, and a new process answers for the rest."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from quantgate.tasks.engine.environment import find_engine
from quantgate.tasks.engine.load_check import check_loads
from quantgate.tasks.engine.server import EngineSpec

pytestmark = pytest.mark.timeout(600)


def _engine_side() -> psutil.Process | None:
    for child in psutil.Process().children(recursive=True):
        try:
            if any("load_check_engine.py" in part for part in child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def test_a_process_killed_loading_one_checkpoint_decides_nothing_and_the_rest_are_answered(tiny_model,
                                                                                          tmp_path):
    specs = {name: EngineSpec(model=tiny_model, served_name=name, dtype="float32", max_model_len=256)
             for name in ("first", "second")}
    answers: dict = {}
    worker = threading.Thread(target=lambda: answers.update(check_loads(
        specs, python=find_engine().python, state_dir=tmp_path, timeout_s=300)))
    worker.start()
    deadline = time.monotonic() + 300
    while not any('"first", "status": "loading"' in p.read_text()
                  for p in tmp_path.glob("load-check/*/answers.jsonl")):
        assert time.monotonic() < deadline and worker.is_alive(), answers
        time.sleep(0.05)
    (process := _engine_side()).send_signal(signal.SIGKILL)  # as the OOM killer would
    worker.join(300)
    assert not worker.is_alive()
    assert answers["first"].transient and "was killed loading it" in answers["first"].reason, answers
    assert answers["second"] is None  # a second process loaded it and computed a token
    assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    log = Path(tmp_path / "engine-logs" / "second.log").read_text()
    assert "Loading weights took" in log  # the engine's own lines, in the checkpoint's log
