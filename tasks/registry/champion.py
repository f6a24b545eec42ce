"""The serving aliases: `champion` (what serves), `canary` (what is being rolled out) and
`previous-champion` (what a rollback restores). Every move goes through `move_alias` (append-only
alias log) and is idempotent: promote or roll back twice and the second changes nothing.

Artifacts of a version an alias points to, or ever pointed to, are never deleted: this module never
deletes a version, and `alias_history` keeps which ones those were.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from quantgate.tasks.calibrate.stats import STATS_FILE
from quantgate.tasks.registry.aliases import move_alias, register_version

CHAMPION, CANARY, PREVIOUS = "champion", "canary", "previous-champion"


def alias_version(client: MlflowClient, model: str, alias: str) -> str | None:
    try:
        return str(client.get_model_version_by_alias(model, alias).version)
    except MlflowException:
        return None


def aliases(client: MlflowClient, model: str) -> dict[str, str | None]:
    return {a: alias_version(client, model, a) for a in (CHAMPION, CANARY, PREVIOUS)}


def ensure_champion(client: MlflowClient, model: str, run_id: str, baseline_checkpoint: str) -> str:
    """The champion's version; the first run of a model registers its baseline as the champion, so
    there is always something serving and something to roll back to."""
    if (version := alias_version(client, model, CHAMPION)) is not None:
        return version
    version = str(register_version(client, model, run_id, baseline_checkpoint))
    client.set_model_version_tag(model, version, "variant", "baseline")
    move_alias(client, model, CHAMPION, version, reason=f"first run of {model}: its baseline (run {run_id})")
    return version


def start_canary(client: MlflowClient, model: str, version: str, reason: str) -> None:
    move_alias(client, model, CANARY, version, reason=reason)


def remove_canary(client: MlflowClient, model: str, reason: str) -> bool:
    """Rollback of a rollout: the canary alias goes; True when there was one."""
    had = alias_version(client, model, CANARY) is not None
    move_alias(client, model, CANARY, None, reason=reason)
    return had


def promote(client: MlflowClient, model: str, version: str, reason: str) -> bool:
    """`champion` → `version`, `previous-champion` → the old champion, `canary` removed. False when
    `version` was the champion already (nothing moved but a stale canary alias)."""
    current = alias_version(client, model, CHAMPION)
    if current == version:
        move_alias(client, model, CANARY, None, reason=f"{reason} (already champion)")
        return False
    if current is not None:
        move_alias(client, model, PREVIOUS, current, reason=f"replaced by version {version}: {reason}")
    move_alias(client, model, CHAMPION, version, reason=reason)
    move_alias(client, model, CANARY, None, reason=f"promoted: {reason}")
    return True


def restore_previous(client: MlflowClient, model: str, reason: str) -> str | None:
    """After a promotion: `champion` back to `previous-champion`. Returns the version restored, or
    None when the champion is that version already (a second rollback changes nothing)."""
    previous = alias_version(client, model, PREVIOUS)
    if previous is None:
        raise ValueError(f"{model}: no `previous-champion` alias: nothing was promoted to roll back from")
    if alias_version(client, model, CHAMPION) == previous:
        return None
    move_alias(client, model, CHAMPION, previous, reason=reason)
    return previous


@dataclass(frozen=True)
class ResolvedVersion:
    model_uri: str
    version: str
    path: str
    variant: str


def local_checkpoint(client: MlflowClient, model: str, version: str, cache_dir: Path) -> str:
    """The version's checkpoint folder on this machine: the artifact store itself when it is a local
    folder (nothing copied), else downloaded once into `cache_dir/<model>/<version>`."""
    source = client.get_model_version(model, version).source
    parsed = urlparse(source)
    if parsed.scheme in ("", "file") and Path(unquote(parsed.path)).is_dir():
        return unquote(parsed.path)
    import mlflow.artifacts

    dst = cache_dir / model / version
    if not (dst / "config.json").is_file():
        dst.mkdir(parents=True, exist_ok=True)
        mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(dst))
    found = next(dst.rglob("config.json"), None)
    if found is None:
        raise FileNotFoundError(f"models:/{model}/{version}: no checkpoint (config.json) under {source}")
    return str(found.parent)


def resolve(client: MlflowClient, model: str, alias: str, cache_dir: Path) -> ResolvedVersion:
    version = alias_version(client, model, alias)
    if version is None:
        raise LookupError(f"models:/{model}@{alias}: no such alias")
    tags = client.get_model_version(model, version).tags
    return ResolvedVersion(f"models:/{model}@{alias}", version,
                           local_checkpoint(client, model, version, cache_dir), tags.get("variant", "?"))


def champion_calibration(client: MlflowClient, model: str, dest_dir: Path) -> str | None:
    """The activation statistics of the calibration the champion was made with: an artifact of the
    pipeline run that registered its version (the parent of the version's run). None when there is no
    champion yet, or its run kept no statistics (a run from before they were logged)."""
    version = alias_version(client, model, CHAMPION)
    if version is None:
        return None
    run_id = client.get_model_version(model, version).run_id
    parent = client.get_run(run_id).data.tags.get("mlflow.parentRunId", run_id)
    dest_dir.mkdir(parents=True, exist_ok=True)
    try:
        return client.download_artifacts(parent, STATS_FILE, str(dest_dir))
    except (MlflowException, OSError):
        return None
