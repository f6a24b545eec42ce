"""The serving application: `champion` and (during a rollout) `canary` arms behind the weighted
router, on Ray Serve's proxy at 127.0.0.1. Each arm is a vLLM engine server (`engine_arm.py`): what
the canary measures is what production serves. `arm_backend="loop"` serves the old hand-written
generation loop instead, kept only so that `bench/serving_load.py` measures the two side by side.

`deploy` is declarative: the same spec deployed again changes nothing that runs; a spec that differs
only in the router's weight or the canary's faults is a light in-place update (user_config), so a
weight step never restarts an engine.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from ray import serve

from quantgate.tasks.runtime.digest import source_digest
from quantgate.tasks.serving import engine_arm, engine_client, faults, protocol, router
from quantgate.tasks.serving.engine_arm import EngineArm
from quantgate.tasks.serving.router import Router


@dataclass(frozen=True)
class ArmSpec:
    model_uri: str  # what the alias resolved to, e.g. models:/smollm2@champion
    version: str
    path: str  # the version's checkpoint on this machine


@dataclass(frozen=True)
class ServingSpec:
    app_name: str
    model_names: tuple[str, ...]  # what clients may put in "model"
    log_dir: str
    champion: ArmSpec
    canary: ArmSpec | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    replica_cpus: float = 0.5  # Ray's accounting; an engine's threads run on cores of their own
    replica_gpus: float = 0.0  # a GPU per arm on a cluster (its engine runs there)
    router_cpus: float = 0.1
    engine: dict[str, Any] = field(default_factory=dict)  # conf.engine.EngineConf's fields
    state_dir: str = ""  # where the engines' logs go (default: log_dir)
    arm_backend: str = "engine"  # "loop": the old generation loop, for the side-by-side bench only
    api_key_env: str | None = None
    default_max_tokens: int = 64
    max_tokens: int = 512
    max_prompt_chars: int = 16_000
    max_queue: int = 64  # requests in flight at the router; past it, 429 with Retry-After
    canary_replicas: int = 1
    champion_replicas: int = 1
    canary_faults: dict[str, float] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def spec_from_args(args: dict[str, Any]) -> tuple[ServingSpec, dict[str, float]]:
    """The spec and the router's settings from a config file's `args` (KubeRay's serveConfigV2)."""
    spec = dict(args["spec"])
    for arm in ("champion", "canary"):
        if spec.get(arm) is not None:
            spec[arm] = ArmSpec(**spec[arm])
    spec["model_names"] = tuple(spec["model_names"])
    shares = {k: float(args.get(k, 0.0)) for k in ("weight", "mirror_share", "shadow_share")}
    return ServingSpec(**spec), shares


def app_from_args(args: dict[str, Any]) -> Any:
    """The application for a Serve config deploy, which calls its import path with one argument,
    the `args` mapping: {spec: ServingSpec's fields, weight, mirror_share, shadow_share}."""
    spec, shares = spec_from_args(args)
    return build(spec, **shares)


def _version(*parts: Any) -> str:
    """A deployment version that changes only with the code or the init arguments. `serve.run` gives
    every deployment a random version otherwise, and a random version restarts every replica (the
    model reloads, ~18 s here) on a weight change that should be a light user_config update.
    (`version` is internal in `.options()` since Ray 2.x; config-file deploys hash it the same way.)"""
    modules = (sys.modules[__name__], engine_arm, engine_client, router, faults, protocol)
    return source_digest(*modules) + "-" + hashlib.sha256(
        json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _arm(spec: ServingSpec, role: str, arm: ArmSpec, replicas: int) -> Any:
    if spec.arm_backend == "loop":
        from quantgate.tasks.serving.replica import ModelReplica

        args = (role, arm.model_uri, arm.version, arm.path, int(spec.engine.get("threads", 1)),
                str(spec.engine.get("dtype", "float32")))
        return ModelReplica.options(name=role, num_replicas=replicas, version=_version(args), _internal=True,
                                    ray_actor_options={"num_cpus": spec.replica_cpus}).bind(*args)
    args = (role, arm.model_uri, arm.version, arm.path, spec.engine, spec.state_dir or spec.log_dir)
    return EngineArm.options(
        name=role, num_replicas=replicas, version=_version(args, spec.replica_cpus, spec.replica_gpus),
        _internal=True, ray_actor_options={"num_cpus": spec.replica_cpus, "num_gpus": spec.replica_gpus},
    ).bind(*args)


def build(spec: ServingSpec, *, weight: float, mirror_share: float, shadow_share: float) -> Any:
    champion = _arm(spec, "champion", spec.champion, spec.champion_replicas)
    canary = _arm(spec, "canary", spec.canary, spec.canary_replicas) if spec.canary is not None else None
    settings = {k: v for k, v in asdict(spec).items()
                if k in ("log_dir", "api_key_env", "default_max_tokens", "max_tokens", "max_prompt_chars")}
    settings["model_names"] = list(spec.model_names)
    return Router.options(
        user_config={"canary_weight": weight if canary is not None else 0.0, "mirror_share": mirror_share,
                     "shadow_share": shadow_share, "canary_faults": spec.canary_faults,
                     "max_queue": spec.max_queue},
        ray_actor_options={"num_cpus": spec.router_cpus},
        version=_version(settings, spec.champion, spec.canary, spec.router_cpus), _internal=True,
    ).bind(champion, canary, settings)


def deploy(spec: ServingSpec, *, weight: float = 0.0, mirror_share: float = 0.0, shadow_share: float = 0.0,
           timeout_s: float = 900) -> str:
    """Deploy (or update) the app and wait until it answers; returns its base URL."""
    if spec.host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"serving.host {spec.host!r}: this server binds loopback only")
    serve.start(http_options={"host": spec.host, "port": spec.port}, detached=False)
    serve.run(build(spec, weight=weight, mirror_share=mirror_share, shadow_share=shadow_share),
              name=spec.app_name,
              route_prefix="/", blocking=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = serve.status().applications.get(spec.app_name)
        if status is not None and status.status == "RUNNING":
            if _answers(spec, weight if spec.canary is not None else 0.0):
                return spec.base_url
        elif status is not None and status.status in ("DEPLOY_FAILED", "UNHEALTHY"):
            raise RuntimeError(f"serving app {spec.app_name}: {status.status}: {status.message[-2000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"serving app {spec.app_name} not running after {timeout_s:.0f} s")


def _answers(spec: ServingSpec, weight: float) -> bool:
    """The router answers, with the weight asked for (a light update has reached it)."""
    try:
        r = httpx.get(f"{spec.base_url}/quantgate/routing", timeout=5)
        return r.status_code == 200 and abs(r.json()["canary_weight"] - weight) < 1e-9
    except httpx.HTTPError:
        return False


def shutdown(app_name: str) -> None:
    serve.delete(app_name)
