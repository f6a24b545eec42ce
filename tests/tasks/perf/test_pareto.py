"""The Pareto front and plot: dominance on both axes, the gate's binding recovery as quality."""

import math

from quantgate.tasks.gate.decide import Verdict
from quantgate.tasks.perf.pareto import ParetoPoint, pareto_front, plot_pareto, quality_of


def _p(name, quality, j, tok_s, passed=True):
    return ParetoPoint(name, quality, j, tok_s, passed)


POINTS = [_p("base", 1.0, 1.0, 10.0), _p("int4", 0.9, 0.4, 25.0), _p("fp8", 0.98, 0.6, 15.0),
          _p("worse_fp8", 0.97, 0.7, 14.0), _p("int2", 0.01, 0.3, 30.0, passed=False),
          _p("no_bench", 0.99, math.nan, math.nan)]


def test_front_keeps_only_undominated_points_per_axis():
    by_energy = pareto_front(POINTS, x="j_per_token", x_lower_is_better=True)
    assert sorted(by_energy) == ["base", "fp8", "int2", "int4"]  # worse_fp8: fp8 beats it on both
    by_speed = pareto_front(POINTS, x="tok_s", x_lower_is_better=False)
    assert sorted(by_speed) == ["base", "fp8", "int2", "int4"]
    twin = [_p("a", 0.9, 0.5, 1.0), _p("b", 0.9, 0.5, 1.0)]  # equal points do not dominate each other
    assert sorted(pareto_front(twin, x="j_per_token", x_lower_is_better=True)) == ["a", "b"]


def test_quality_is_the_lowest_recovery_the_gate_checked():
    v = Verdict("x", True, recovery=0.98, worst_slice="s", worst_recovery=0.96,
                task_recovery={"lmeval.a.acc": 0.99, "lmeval.b.f1": 0.93},
                worst_task_slice="lmeval.a.acc@s", worst_task_slice_recovery=0.95)
    assert quality_of(v) == 0.93
    assert quality_of(Verdict("y", True, recovery=0.97, worst_recovery=0.99)) == 0.97


def test_plot_writes_a_png(tmp_path):
    out = plot_pareto(POINTS, tmp_path / "p" / "pareto.png", threshold=0.95, batch=1,
                      energy_method="estimated", machine="test CPU")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
