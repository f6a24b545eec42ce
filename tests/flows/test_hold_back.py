"""Quantizations are held back until their CPUs are free of evaluations (flows.quantize_and_gate)."""

from types import SimpleNamespace

from quantgate.flows.quantize_and_gate import _next_quantizations


def _spec(name, cpus=1):
    return SimpleNamespace(name=name, resources=SimpleNamespace(num_cpus=cpus))


def test_quantizations_take_only_free_cpus_in_conf_order():
    queue = [_spec("a"), _spec("b"), _spec("c")]
    assert [s.name for s in _next_quantizations(queue, 2, 0, False)] == ["a", "b"]
    assert [s.name for s in queue] == ["c"]
    assert _next_quantizations(queue, 2, 2, True) == []  # two evaluations hold both CPUs
    assert [s.name for s in _next_quantizations(queue, 2, 1, True)] == ["c"] and not queue


def test_one_always_starts_when_nothing_runs_and_a_cluster_takes_all():
    assert [s.name for s in _next_quantizations([_spec("big", 4)], 2, 0, False)] == ["big"]
    assert [s.name for s in _next_quantizations([_spec("a"), _spec("b")], None, 9, True)] == ["a", "b"]
