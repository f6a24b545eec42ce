"""The model registry: one version per checkpoint, aliases, and a history of every alias move.

A version is keyed on its checkpoint's content-addressed folder name (tag `quantgate.checkpoint`):
registering the same checkpoint again returns the existing version and copies nothing.

MLflow keeps no alias history, so every move is appended as a registered-model tag
`alias_log.<ns since epoch>-<random>` holding JSON (alias, version, previous, reason, time). Each
entry has a key no other writer can produce, so concurrent runs never overwrite one another, and no
entry is ever rewritten: the log is append-only, ordered by its keys. (`previous` is what this
writer saw just before its move; two writers racing on one alias may both name the same one.)
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

CHECKPOINT_TAG = "quantgate.checkpoint"
LOG_PREFIX = "alias_log."


def ensure_registered_model(client: MlflowClient, model_name: str) -> None:
    try:
        client.create_registered_model(model_name)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def existing_version(client: MlflowClient, model_name: str, checkpoint: str) -> str | None:
    """The version already registered for this checkpoint folder, if any."""
    key = Path(checkpoint).name
    found = client.search_model_versions(f"name='{model_name}' and tags.`{CHECKPOINT_TAG}` = '{key}'")
    return min((v.version for v in found), key=int) if found else None


def register_version(client: MlflowClient, model_name: str, run_id: str, checkpoint: str) -> str:
    """The version for `checkpoint`: the existing one, else the checkpoint copied into the run's
    artifacts and registered (tagged with its folder name, so a re-run finds it)."""
    ensure_registered_model(client, model_name)
    if (version := existing_version(client, model_name, checkpoint)) is not None:
        return version
    client.log_artifacts(run_id, checkpoint, artifact_path="checkpoint")
    source = f"{client.get_run(run_id).info.artifact_uri}/checkpoint"
    mv = client.create_model_version(model_name, source=source, run_id=run_id,
                                     tags={CHECKPOINT_TAG: Path(checkpoint).name})
    return mv.version


def move_alias(client: MlflowClient, model_name: str, alias: str, version: str | None, *,
               reason: str) -> None:
    """Point `alias` at `version` (None removes it) and append the move to the alias log."""
    try:
        previous = client.get_model_version_by_alias(model_name, alias).version
    except MlflowException:
        previous = None
    if previous == version:
        return  # idempotent: the same move twice changes nothing the second time
    if version is None:
        client.delete_registered_model_alias(model_name, alias)
    else:
        client.set_registered_model_alias(model_name, alias, version)
    entry = {"alias": alias, "version": version, "previous": previous, "reason": reason,
             "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    key = f"{LOG_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
    client.set_registered_model_tag(model_name, key, json.dumps(entry))


def alias_history(client: MlflowClient, model_name: str) -> list[dict[str, Any]]:
    tags = client.get_registered_model(model_name).tags
    return [json.loads(tags[k]) for k in sorted(tags) if k.startswith(LOG_PREFIX)]
