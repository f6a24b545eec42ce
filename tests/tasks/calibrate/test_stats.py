import random

from quantgate.tasks.calibrate.stats import calibrate, calibration_drift, mean_abs_profiles
from quantgate.tasks.traffic.load import load_traffic

from factories import record, write_traffic

CODE = ["def f{0}(x):\n    return x * {0} + {1}", "for i in range({0}):\n    print(i, {1})",
        "class C{0}:\n    def g(self):\n        return [{1}, {0}]"]
CHAT = ["Hello, my order {0} has not arrived yet, can you help?",
        "I would like a refund for invoice {0}, thank you {1}.",
        "My account password stopped working after {0} tries."]


def _requests(tmp_path, name, templates, seed):
    rng = random.Random(seed)
    recs = []
    for i in range(24):
        t = rng.choice(templates)
        recs.append(record(i, prompt=t.format(rng.randint(1, 99), rng.randint(1, 99)),
                           answer=t.format(rng.randint(1, 99), rng.randint(1, 99))))
    path = write_traffic(tmp_path / f"{name}.jsonl", recs)
    return load_traffic(path, max_line_bytes=65536, length_buckets=(200,)).requests


def test_stats_artifact_has_every_linear(tmp_path, tiny_model):
    reqs = _requests(tmp_path, "a", CODE, 0)
    res = calibrate(tiny_model, reqs, tmp_path / "out", max_seq_len=64, top_k=4)
    profiles = mean_abs_profiles(res.stats_path)
    assert "model.layers.0.self_attn.q_proj" in profiles and "lm_head" in profiles
    assert profiles["model.layers.1.mlp.down_proj"].shape == (128,)
    assert res.tokens > 24 * 5


def test_other_domain_drifts_more_than_a_resample(tmp_path, tiny_model):
    def stats(name, templates, seed):
        reqs = _requests(tmp_path, name, templates, seed)
        return calibrate(tiny_model, reqs, tmp_path / name, max_seq_len=64, top_k=4).stats_path

    code_a, code_b, chat = stats("ca", CODE, 1), stats("cb", CODE, 2), stats("ch", CHAT, 3)
    same, other = calibration_drift(code_a, code_b), calibration_drift(code_a, chat)
    assert other > 2 * same, (same, other)
