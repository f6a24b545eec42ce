"""The layer loops' budget (`BudgetClock`) on a clock the test moves: a layer that runs past its
share (AQLM's floor of search rounds does) shortens the shares of the layers left, so the budget's
end does not cut the last layer; a layer reached past the budget gets the cheap path."""

import types

import pytest
import torch

from quantgate.tasks.quantize.codebook import layers as layer_loop
from quantgate.tasks.quantize.codebook.layers import LayerFunctions, LayerOutcome, quantize_layers


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def run(monkeypatch, seconds_per_layer: list[float]):
    """Three equal Linears; layer i's search takes seconds_per_layer[i]. Returns (deadline each full
    search was given, the loop's notes)."""
    clock = FakeTime()
    monkeypatch.setattr(layer_loop, "time", types.SimpleNamespace(monotonic=clock.monotonic))
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8, bias=False) for _ in range(3)])
    hessians = {str(i): torch.eye(8) for i in range(3)}
    given: dict[str, float] = {}

    def full(name, W, H, end):
        given[name] = end
        clock.now += seconds_per_layer[int(name)]
        return LayerOutcome({"w": W}, {"proxy_loss": 0.1})

    def cheap(name, W, H):
        return LayerOutcome({"w": W}, {"proxy_loss": 0.5})

    result = quantize_layers(model, hessians, deadline=30.0,
                             fns=LayerFunctions(full, cheap, {"quant_method": "test"}))
    return given, result.notes


def test_a_layer_past_its_share_is_set_aside_for_the_layers_left(monkeypatch):
    given, notes = run(monkeypatch, [20.0, 1.0, 1.0])
    # layer 0: a third of 30 s; it took 20 (10 over). Layer 1 is left 10 s, of which layer 2 will
    # overrun 10 at that rate: its share is 0 (not 5, as a plain share of what is left would give).
    assert given["0"] == pytest.approx(10.0)
    assert given["1"] == pytest.approx(20.0)
    # layer 1 overran its (empty) share by 1 s; no layer after layer 2 needs time set aside, so it
    # gets all that is left
    assert given["2"] == pytest.approx(30.0)
    assert notes["cut_layers"] == []
    assert notes["layer_loop_seconds"] == {"search": pytest.approx(22.0)}


def test_layers_reached_past_the_budget_get_the_cheap_path(monkeypatch):
    given, notes = run(monkeypatch, [35.0, 1.0, 1.0])
    assert list(given) == ["0"] and notes["cut_layers"] == ["1", "2"]
    assert notes["cheap_layers"] == 2 and set(notes["layer_loop_seconds"]) == {"search", "cut"}


def test_without_overruns_each_layer_gets_its_weight_share(monkeypatch):
    given, notes = run(monkeypatch, [10.0, 10.0, 10.0])
    assert [given[n] for n in "012"] == pytest.approx([10.0, 20.0, 30.0])
    assert notes["cut_layers"] == []
