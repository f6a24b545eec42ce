"""Settings that come from the environment, not from a profile: where the shared servers are, and
secrets. Read fresh on each call (a run sets PREFECT_API_URL once its server is up). Secrets are
`SecretStr`: their repr is masked, so they never reach a log line by accident."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class EnvSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    mlflow_tracking_uri: str | None = Field(default=None, validation_alias="MLFLOW_TRACKING_URI")
    prefect_api_url: str | None = Field(default=None, validation_alias="PREFECT_API_URL")


def env_settings() -> EnvSettings:
    return EnvSettings()


def secret_from_env(name: str) -> SecretStr | None:
    """The secret in the environment variable `name` (named in conf, e.g. judge.api_key_env), or None."""

    class Named(BaseSettings):
        model_config = SettingsConfigDict(extra="ignore")
        value: SecretStr | None = Field(default=None, validation_alias=name)

    found = Named().value
    return found if found is not None and found.get_secret_value() else None
