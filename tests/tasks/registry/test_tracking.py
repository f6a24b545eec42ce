"""MLflow on SQLite, for real: aliases, their history, and the registry."""

import pytest
from mlflow.tracking import MlflowClient

from quantgate.tasks.registry.tracking import (
    alias_history,
    ensure_experiment,
    metric_name,
    move_alias,
    register_version,
    tracking_uri,
)


@pytest.fixture
def client(tmp_path):
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def _version(client, tmp_path, name="m"):
    exp = ensure_experiment(client, "e", tmp_path / "art")
    run = client.create_run(exp).info.run_id
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "config.json").write_text("{}")
    return register_version(client, name, run, str(ckpt))


def test_alias_moves_are_recorded_and_idempotent(client, tmp_path):
    v1, v2 = _version(client, tmp_path), _version(client, tmp_path)
    move_alias(client, "m", "canary", v1, reason="first")
    move_alias(client, "m", "canary", v1, reason="again")  # no-op
    move_alias(client, "m", "canary", v2, reason="better")
    move_alias(client, "m", "canary", None, reason="rollback")
    history = alias_history(client, "m")
    assert [(h["version"], h["previous"], h["reason"]) for h in history] == [
        (v1, None, "first"), (v2, v1, "better"), (None, v2, "rollback")]
    assert "canary" not in client.get_registered_model("m").aliases


def test_registered_version_points_at_copied_artifacts(client, tmp_path):
    v = _version(client, tmp_path)
    mv = client.get_model_version("m", v)
    assert mv.source.endswith("/checkpoint")
    run_files = [f.path for f in client.list_artifacts(mv.run_id, "checkpoint")]
    assert run_files == ["checkpoint/config.json"]


def test_env_tracking_uri_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    assert tracking_uri("sqlite:///y.db", tmp_path) == "sqlite:///x.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_metric_names_are_mlflow_safe():
    assert metric_name("ppl", "domain=json_tool") == "ppl.domain.json_tool"
    assert metric_name("ppl", "tenant=a+b") == "ppl.tenant.a_b"
