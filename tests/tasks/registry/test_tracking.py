"""MLflow on SQLite, for real: aliases, their history, and the registry."""

import pytest
from mlflow.tracking import MlflowClient

from quantgate.tasks.registry.aliases import alias_history, move_alias, register_version
from quantgate.tasks.registry.tracking import ensure_experiment, metric_name, tracking_uri


@pytest.fixture
def client(tmp_path):
    return MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")


def _version(client, tmp_path, name="m", folder="ckpt-1"):
    exp = ensure_experiment(client, "e", tmp_path / "art")
    run = client.create_run(exp).info.run_id
    ckpt = tmp_path / folder  # content-addressed, as the variant folders are
    ckpt.mkdir(exist_ok=True)
    (ckpt / "config.json").write_text("{}")
    return register_version(client, name, run, str(ckpt))


def test_alias_moves_are_recorded_and_idempotent(client, tmp_path):
    v1, v2 = _version(client, tmp_path), _version(client, tmp_path, folder="ckpt-2")
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


def test_the_same_checkpoint_registers_once_and_is_copied_once(client, tmp_path):
    first = _version(client, tmp_path)
    again = _version(client, tmp_path)  # a re-run, from another run id
    assert again == first
    assert len(client.search_model_versions("name='m'")) == 1
    copies = [r for r in client.search_runs([client.get_experiment_by_name("e").experiment_id])
              if client.list_artifacts(r.info.run_id, "checkpoint")]
    assert len(copies) == 1


def test_concurrent_alias_moves_all_land_in_the_log(client, tmp_path):
    """Two runs moving aliases at once: every move is in the history, none overwrites another."""
    from concurrent.futures import ThreadPoolExecutor

    versions = [_version(client, tmp_path, folder=f"ckpt-{i}") for i in range(4)]
    uri = client.tracking_uri

    def move(i):
        own = MlflowClient(tracking_uri=uri)
        for k in range(5):
            move_alias(own, "m", f"lane-{i}", versions[(i + k) % 4], reason=f"{i}.{k}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(move, range(4)))
    reasons = sorted(h["reason"] for h in alias_history(client, "m"))
    assert reasons == sorted(f"{i}.{k}" for i in range(4) for k in range(5))


def test_env_tracking_uri_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///x.db")
    assert tracking_uri("sqlite:///y.db", tmp_path) == "sqlite:///x.db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_metric_names_are_mlflow_safe():
    assert metric_name("ppl", "domain=json_tool") == "ppl.domain.json_tool"
    assert metric_name("ppl", "tenant=a+b") == "ppl.tenant.a_b"
