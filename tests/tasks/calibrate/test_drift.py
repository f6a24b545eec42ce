"""The drift decision on real calibrations of a tiny model: a resample stays under the threshold,
another domain goes over it and triggers, and the same drifted traffic does not trigger twice."""

import json

import pytest
import torch
from safetensors.torch import save_file

from quantgate.tasks.calibrate.drift import assess_drift, record_trigger
from quantgate.tasks.calibrate.stats import calibrate, calibration_drift
from quantgate.tasks.calibrate.window import cut_window

from .test_stats import CHAT, CODE, _requests
from factories import record, write_traffic


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("drift")

    def stats(name, templates, seed):
        reqs = _requests(tmp, name, templates, seed)
        return calibrate(tiny_model, reqs, tmp / name, max_seq_len=64, top_k=4).stats_path

    out = {"champion": stats("champion", CODE, 1), "resample": stats("resample", CODE, 2),
           "chat": stats("chat", CHAT, 3), "chat_again": stats("chat_again", CHAT, 4)}
    window = cut_window(write_traffic(tmp / "log.jsonl", [record(i) for i in range(10)]), 10, tmp / "w")
    # A threshold between a resample's drift and another domain's, as conf's default is on SmolLM2.
    same, other = (calibration_drift(out["champion"], out[k]) for k in ("resample", "chat"))
    assert other > 2 * same, (same, other)
    return tmp, out, window, (same * other) ** 0.5


def test_a_resample_of_the_same_traffic_does_not_trigger(calibrated, tmp_path):
    _, stats, window, threshold = calibrated
    r = assess_drift(reference_stats=stats["champion"], window_stats=stats["resample"], window=window,
                     threshold=threshold, drift_dir=tmp_path)
    assert not r.drifted and not r.trigger and r.score < threshold
    assert "still fits" in r.reason
    saved = json.loads((tmp_path / window.digest / "report.json").read_text())
    assert saved["trigger"] is False and len(saved["top_layers"]) == 5
    assert "# Drift report" in (tmp_path / window.digest / "report.md").read_text()


def test_another_domain_triggers_once_then_not_again_for_the_same_traffic(calibrated, tmp_path):
    _, stats, window, threshold = calibrated
    first = assess_drift(reference_stats=stats["champion"], window_stats=stats["chat"], window=window,
                         threshold=threshold, drift_dir=tmp_path)
    assert first.drifted and first.trigger and first.score > threshold
    # The layers that moved most come first.
    assert [d for _, d in first.top_layers] == sorted((d for _, d in first.top_layers), reverse=True)
    record_trigger(first, tmp_path)
    # An hour later the champion is unchanged (the gate kept it) and the traffic is the same mix.
    again = assess_drift(reference_stats=stats["champion"], window_stats=stats["chat_again"],
                         window=window, threshold=threshold, drift_dir=tmp_path)
    assert again.drifted and not again.trigger
    assert "last triggered requantization" in again.reason
    # Traffic that moves back to the first mix is far from the triggering window: a new trigger.
    back = assess_drift(reference_stats=stats["chat"], window_stats=stats["champion"], window=window,
                        threshold=threshold, drift_dir=tmp_path)
    assert back.trigger


def test_layers_of_another_model_are_an_error(calibrated, tmp_path):
    _, stats, window, threshold = calibrated
    other = tmp_path / "other.safetensors"
    save_file({"foo.mean_abs": torch.ones(3), "foo.max_abs": torch.ones(3)}, str(other))
    with pytest.raises(ValueError, match="share no layer"):
        assess_drift(reference_stats=stats["champion"], window_stats=str(other), window=window,
                     threshold=threshold, drift_dir=tmp_path)
