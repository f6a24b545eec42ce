from pathlib import Path

import pytest

from quantgate.conf.load import ConfigError, load_config
from quantgate.conf.methods import METHOD_NAMES
from quantgate.tasks.quantize.registry import METHODS_PACKAGE, quantizer_for

CONF_DIR = Path(__file__).parents[2] / "conf"


PIPELINE_PROFILES = sorted(p for p in CONF_DIR.glob("*.yaml") if p.name != "hardware.yaml")


@pytest.mark.parametrize("path", PIPELINE_PROFILES, ids=lambda p: p.name)
def test_every_profile_validates(path):
    config = load_config(path)
    assert config.variants
    for v in config.variants:
        assert quantizer_for(v.method).NEEDS_CALIBRATION in (True, False)


def test_default_is_embedded_and_points_at_shipped_traffic():
    config = load_config()
    assert config.traffic.path.is_file(), config.traffic.path
    # Every method a user can ship on a CPU is in the default (FP8 W8A8, with or without the FP8 KV
    # cache, is for GPU targets: a CPU engine serves it on a fallback); the quality profile holds every
    # method there is (the default leaves out the slowest 2-bit control, int2_gptq, for time).
    shipped = {v.method for v in load_config(CONF_DIR / "quality.yaml").variants if not v.control}
    assert shipped - {"fp8_w8a8", "kv_fp8"} <= {v.method for v in config.variants}
    assert {v.method for v in load_config(CONF_DIR / "quality.yaml").variants} == set(METHOD_NAMES)


def test_every_method_has_its_module_and_every_module_is_a_method():
    import importlib
    import pkgutil

    package = importlib.import_module(METHODS_PACKAGE)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert modules == set(METHOD_NAMES)
    for method in METHOD_NAMES:
        quantizer_for(method)  # raises unless the module has what the runner calls


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_unknown_key_is_named(tmp_path):
    p = _write(tmp_path, "variants: [{name: a, method: fp8_w8a8}]\ngate: {recovry: 0.9}\n")
    with pytest.raises(ConfigError, match=r"gate\.recovry: unknown key"):
        load_config(p)


def test_unknown_method_names_the_variant(tmp_path):
    p = _write(tmp_path, "variants: [{name: mine, method: int3_magic}]\n")
    with pytest.raises(ConfigError, match=r"variants\[mine\]\.method: unknown or missing method"):
        load_config(p)


def test_bad_param_names_variant_and_key(tmp_path):
    p = _write(tmp_path, "variants: [{name: g, method: int4_gptq, group_size: 4}]\n")
    with pytest.raises(ConfigError, match=r"variants\[g\]\.group_size"):
        load_config(p)


def test_duplicate_names_rejected(tmp_path):
    p = _write(tmp_path, "variants: [{name: a, method: fp8_w8a8}, {name: a, method: kv_fp8}]\n")
    with pytest.raises(ConfigError, match="duplicate name"):
        load_config(p)


def test_relative_traffic_path_resolves_against_the_yaml(tmp_path):
    p = _write(tmp_path, "traffic: {path: t.jsonl}\nvariants: [{name: a, method: fp8_w8a8}]\n")
    assert load_config(p).traffic.path == tmp_path / "t.jsonl"


def test_select_keeps_named_variants_and_rejects_unknown():
    config = load_config()
    assert [v.name for v in config.select(["int4_rtn", "int8_w8a8"]).variants] == [
        "int4_rtn", "int8_w8a8"]
    with pytest.raises(ValueError, match="unknown"):
        config.select(["nope"])


def test_unknown_hardware_profile_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("variants: [{name: f, method: fp8_w8a8}]\nplan: {target: tpu-v9}\n")
    with pytest.raises(ConfigError, match=r"plan.target(.|\n)*tpu-v9(.|\n)*h200"):
        load_config(bad)
    bad.write_text("variants: [{name: f, method: fp8_w8a8}]\nbench: {batch_sizes: [1, 8], gate_batch: 4}\n")
    with pytest.raises(ConfigError, match="gate_batch=4"):
        load_config(bad)


def test_a_typo_in_gate_per_metric_fails_with_the_key(tmp_path):
    base = "variants: [{name: a, method: fp8_w8a8}]\n"
    for key, why in [("lmeval.qg_facts_mc.accuracy", "qg_facts_mc has no metric 'accuracy'"),
                     ("lmeval.qg_fact_mc.acc", "task 'qg_fact_mc' is not in lmeval.tasks"),
                     ("perplexity", "not a gated metric")]:
        budget = "{enable: 0.01, monitor: 0.02, investigate: 0.03}"
        p = _write(tmp_path, base + f"gate: {{per_metric: {{{key}: {budget}}}}}\n")
        with pytest.raises(ConfigError, match=rf"gate\.per_metric\.{key}: {why}"):
            load_config(p)
    ok = _write(tmp_path, base + "gate: {per_metric: {lmeval.qg_arith.exact_match: "
                "{enable: 0.01, monitor: 0.05, investigate: 0.1}}, budgets: {ppl: "
                "{enable: 0.02, monitor: 0.04, investigate: 0.08}}}\n")
    gate = load_config(ok).gate
    assert gate.budget("lmeval.qg_arith.exact_match").investigate == 0.1
    assert gate.budget("ppl").monitor == 0.04 and gate.budget("lmeval.qg_replay.token_f1").enable == 0.005
    for bad, why in [("budgets: {ppl: {enable: 0.1, monitor: 0.05, investigate: 0.2}}",
                      "enable <= monitor <= investigate"),
                     ("task_metrics: {qg_arith: accuracy}", "qg_arith has no metric 'accuracy'"),
                     ("budgets: {bleu: {enable: 0, monitor: 0, investigate: 0}}", "gate.budgets.bleu")]:
        with pytest.raises(ConfigError, match=why):
            load_config(_write(tmp_path, base + f"gate: {{{bad}}}\n"))


def test_an_unknown_lmeval_task_fails_at_load_and_builtins_are_known(tmp_path):
    base = "variants: [{name: a, method: fp8_w8a8}]\n"
    p = _write(tmp_path, base + "lmeval: {tasks: [qg_facts_mc, qg_arithm]}\n")
    with pytest.raises(ConfigError, match=r"lmeval\.tasks: .*unknown lm-eval task\(s\) \['qg_arithm'\]"):
        load_config(p)
    p = _write(tmp_path, base + "lmeval: {tasks: [qg_arith, gsm8k, mmlu]}\n")
    assert load_config(p).lmeval.tasks == ("qg_arith", "gsm8k", "mmlu")


def test_method_names_come_from_the_specs():
    from quantgate.conf.methods import SPECS

    assert METHOD_NAMES == tuple(s.model_fields["method"].annotation.__args__[0] for s in SPECS)
    assert len(set(METHOD_NAMES)) == len(SPECS)


def test_env_settings_come_from_the_environment_and_secrets_are_masked(monkeypatch):
    from quantgate.conf.settings import env_settings, secret_from_env

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    monkeypatch.setenv("QG_TEST_SECRET", "sk-test-0123456789abcdef")
    assert env_settings().mlflow_tracking_uri == "sqlite:///x.db"
    secret = secret_from_env("QG_TEST_SECRET")
    assert secret.get_secret_value() == "sk-test-0123456789abcdef"
    assert "0123" not in repr(secret) and "0123" not in str(secret)
    assert secret_from_env("QG_TEST_NOT_SET") is None
