"""Load and validate a pipeline YAML; every error names the key to change."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from quantgate.conf.methods import METHOD_NAMES
from quantgate.conf.schema import PipelineConfig


class ConfigError(ValueError):
    """A config that cannot be used; the message names each key to fix, one per line."""


def default_config_path() -> Path:
    return Path(str(resources.files("quantgate.conf") / "default.yaml"))


def load_config(path: str | Path | None = None) -> PipelineConfig:
    """Read `path` (default: the embedded `conf/default.yaml`) and validate it.

    Relative `traffic.path` values are resolved against the YAML file's folder, so a
    profile and its data travel together.
    """
    path = Path(path) if path is not None else default_config_path()
    if not path.is_file():
        raise ConfigError(f"--config: {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections (model, traffic, ...)")
    raw = _resolve_paths(raw, path.parent)
    try:
        return PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, raw, source=path)) from None


def _resolve_paths(raw: dict[str, Any], base: Path) -> dict[str, Any]:
    traffic = raw.get("traffic")
    if isinstance(traffic, dict) and isinstance(traffic.get("path"), str):
        p = Path(traffic["path"]).expanduser()
        raw = {**raw, "traffic": {**traffic, "path": str(p if p.is_absolute() else base / p)}}
    return raw


def format_errors(exc: ValidationError, raw: dict[str, Any], *, source: Path) -> str:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        # Name variants by their `name` rather than their index, and drop pydantic's
        # union-member segment ("variants.2.int4_gptq.group_size" -> "variants[gptq].group_size").
        if len(loc) >= 2 and loc[0] == "variants" and isinstance(loc[1], int):
            variants = raw.get("variants") or []
            item = variants[loc[1]] if loc[1] < len(variants) else {}
            label = item.get("name", loc[1]) if isinstance(item, dict) else loc[1]
            rest = loc[3:] if len(loc) > 2 and loc[2] in METHOD_NAMES else loc[2:]
            loc = [f"variants[{label}]", *rest]
        key = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            key, msg = f"{key}.method", f"unknown or missing method; known: {', '.join(METHOD_NAMES)}"
        elif err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling and section)"
        lines.append(f"{source}: {key}: {msg}")
    return "\n".join(lines)
