"""scripts/pip_progress.sh (what `make install` wraps pip in): shows progress lines only, keeps the
exit status, shows the log's tail on failure and removes it on success, and takes the command down
with it when stopped (else a second `make install` would race an orphaned pip in the same venv)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "pip_progress.sh"


def run(cmd: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "bash", "-c", cmd], capture_output=True, text=True, timeout=60,
                          env=os.environ | {"TMPDIR": str(tmp_path)})


@pytest.mark.timeout(90)
def test_success_shows_only_progress_lines_and_removes_the_log(tmp_path):
    proc = run("echo Collecting torch; echo a noisy line; echo Successfully installed torch", tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == ["Collecting torch", "Successfully installed torch"]
    assert not list(tmp_path.glob("pip-*.log"))


@pytest.mark.timeout(90)
def test_a_tag_marks_every_line_of_one_of_two_installs(tmp_path):
    proc = subprocess.run([str(SCRIPT), "bash", "-c", "echo Collecting vllm; exit 4"], capture_output=True,
                          text=True, timeout=60, env=os.environ | {"TMPDIR": str(tmp_path),
                                                                   "PIP_PROGRESS_TAG": "engine"})
    assert proc.returncode == 4
    assert proc.stdout.splitlines()[:2] == ["[engine] Collecting vllm", "[engine] pip failed (exit 4); "
                                            f"the last lines of {next(tmp_path.glob('pip-*.log'))}:"]


@pytest.mark.timeout(90)
def test_failure_keeps_the_status_and_shows_the_log_tail(tmp_path):
    proc = run("echo Collecting x; echo 'ERROR: no matching distribution for x'; exit 3", tmp_path)
    assert proc.returncode == 3
    assert "pip failed (exit 3)" in proc.stdout and "ERROR: no matching distribution for x" in proc.stdout
    assert len(list(tmp_path.glob("pip-*.log"))) == 1


@pytest.mark.timeout(90)
def test_stopping_it_stops_the_command(tmp_path):
    pidfile = tmp_path / "pid"
    cmd = f"echo $$ > {pidfile}; echo Collecting y; exec sleep 300"
    proc = subprocess.Popen([str(SCRIPT), "bash", "-c", cmd], stdout=subprocess.PIPE, text=True,
                            env=os.environ | {"TMPDIR": str(tmp_path)})
    assert proc.stdout.readline().strip() == "Collecting y"
    child = int(pidfile.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 130
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail(f"the wrapped command (pid {child}) outlived the script")
