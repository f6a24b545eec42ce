"""One rollout per model: a second is refused; a holder killed with -9 does not keep the lock."""

import os
import signal
import subprocess
import sys
import time

import pytest

from quantgate.tasks.rollout.log import RolloutBusy, RolloutLock

HOLD = """
import sys, time
from pathlib import Path
from quantgate.tasks.rollout.log import RolloutLock
with RolloutLock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_second_holder_refused_and_dead_holder_releases(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(RolloutBusy, match=f"pid {proc.pid}"):
            with RolloutLock(tmp_path):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while True:  # the kernel drops a dead process's flock at once; allow for process teardown
        try:
            with RolloutLock(tmp_path):
                break
        except RolloutBusy:
            assert time.monotonic() < deadline
            time.sleep(0.1)
