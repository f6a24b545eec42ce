"""The serving bench: its steady-state window on made-up sample series with known answers, its meter
over a real process tree. vLLM's own benchmark against a real engine: tests/tasks/engine/
test_engine_server.py (on that module's server)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

import pytest

from quantgate.tasks.perf.energy import ProcessTreeCpuMeter
from quantgate.tasks.perf.serving_bench import (
    WHOLE_RUN,
    Sample,
    generation_span,
    serving_meter,
    steady_window,
    window_energy,
)


@pytest.mark.parametrize(("running", "full", "want"), [
    ([0, 2, 4, 4, 4, 3, 1, 0], 4, (2, 4)),  # ramp, full, drain
    ([4, 4, 4, 2, 0], 4, (0, 2)),  # full from the first sample
    ([0, 4, 4, 4], 4, (1, 3)),  # still full at the last sample
    ([0, 4, 4, 3, 4, 4, 1, 0], 4, (1, 5)),  # a dip in the middle: turnover, inside the window
    ([0, 1, 3, 3, 2, 0], 4, None),  # never full
    ([0, 4, 0, 0], 4, None),  # one full sample is no window
    ([], 4, None),
])
def test_steady_window(running, full, want):
    assert steady_window(running, full) == want


@pytest.mark.parametrize(("tokens", "want"), [
    ([5, 5, 5, 8, 12, 20, 20, 20], (2, 5)),  # the last sample before it moved, the first at its end
    ([0, 16], (0, 1)),
    ([5, 5, 5], None),  # nothing generated
    ([], None),
])
def test_generation_span(tokens, want):
    assert generation_span(tokens) == want


def _samples(running, tokens, joules):
    rows = zip(running, tokens, joules, strict=True)
    return [Sample(0.25 * i, r, n, j) for i, (r, n, j) in enumerate(rows)]


def test_joules_per_token_over_the_steady_state_only():
    # Ramp-up and drain cost 1 J each for 20 tokens; the full batch 8 J for 80 tokens.
    s = _samples([0, 4, 4, 4, 0], [0, 0, 40, 80, 100], [0, 1, 5, 9, 10])
    e = window_energy(s, 4, method="estimated", detail="d")
    assert (e.j_per_token, e.joules, e.tokens, e.samples, e.full_samples) == (0.1, 8, 80, 3, 3)
    assert e.seconds == 0.5 and e.window == "steady state, 4 running" and e.method == "estimated"


def test_never_full_falls_back_to_the_whole_run_and_says_so():
    s = _samples([0, 0, 2, 3, 1, 0, 0], [10, 10, 20, 40, 50, 50, 50], [0, 2, 4, 6, 8, 10, 12])
    e = window_energy(s, 4, method="rapl", detail="d")
    assert e.window == WHOLE_RUN
    # samples 1..4: every token, an idle sample at each edge
    assert (e.tokens, e.joules, e.samples, e.full_samples) == (40, 6, 4, 0)


def test_a_dip_inside_the_window_is_counted_with_it():
    s = _samples([0, 4, 4, 2, 4, 1, 0], [0, 10, 20, 30, 40, 45, 48], [0, 1, 2, 3, 4, 5, 6])
    e = window_energy(s, 4, method="estimated", detail="d")
    assert (e.tokens, e.joules, e.samples, e.full_samples) == (30, 3, 4, 3)


def test_a_full_window_without_a_token_in_it_falls_back_to_the_whole_run():
    # Steps slower than the sampling: the counter did not move while two samples saw the batch full.
    s = _samples([0, 4, 4, 0], [0, 0, 0, 16], [0, 1, 2, 3])
    e = window_energy(s, 4, method="estimated", detail="d")
    assert e.window == WHOLE_RUN and (e.tokens, e.joules) == (16, 1)


def test_no_tokens_is_nan_not_a_figure():
    e = window_energy(_samples([0, 0], [3, 3], [0, 1]), 1, method="estimated", detail="d")
    assert math.isnan(e.j_per_token) and e.window == "no tokens counted"


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
BURN_IN_A_GRANDCHILD = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}])"


def test_the_meter_counts_cpu_time_of_the_whole_process_tree():
    """The engine decodes in child processes: their CPU time counts, our own process's does not."""
    child = subprocess.Popen([sys.executable, "-c", BURN_IN_A_GRANDCHILD])
    meter = ProcessTreeCpuMeter(child.pid, watts_per_busy_core=10.0, base_watts=0.0)
    meter.begin()
    readings = []
    while child.poll() is None:  # read while it runs, as the sampler does
        readings.append(meter.end())
        time.sleep(0.05)
    assert readings[-1].method == "estimated" and "process tree" in readings[-1].detail
    assert max(r.joules for r in readings) >= 10.0 * 0.2  # the grandchild's 0.4 CPU-s, most of it seen


def test_without_rapl_the_meter_is_the_estimate_and_says_why(tmp_path):
    meter, notes = serving_meter(os.getpid(), watts_per_busy_core=1, base_watts=1,
                                 rapl_root=tmp_path / "no-powercap")
    assert meter.method == "estimated" and notes[0].startswith("rapl:")

