"""The Kubernetes work pool's base job template (infra/k8s/work-pool-template.json): each scheduled flow
run becomes this Job. Rendered with Prefect's own templating, as the worker renders it, then held to
the same rules as the manifests: Kubernetes' schema, pinned image, no inline secret, resources,
references; and to the cluster's wiring: the shared state claim where conf/cluster.yaml's state dir
is (task results and checkpoints live there), the RayCluster's image, the judge's key."""

from __future__ import annotations

import copy
import json
import re
import shlex
from typing import Any

import pytest
from k8s_checks import (
    K8S,
    K8S_VERSIONS,
    NAMESPACE,
    _cluster_conf,
    _container,
    _env,
    check_images_pinned,
    check_no_inline_secrets,
    check_references,
    check_resources,
    core_errors,
    deployed,
    example_secrets,
    find,
)
from prefect.utilities.templating import apply_values, find_placeholders

TEMPLATE = json.loads((K8S / "work-pool-template.json").read_text(encoding="utf-8"))
# What Prefect's worker fills in per flow run, besides the variables' defaults.
RUN = {"name": "quantize-smollm2-abc12", "command": "prefect flow-run execute",
       "labels": {"prefect.io/flow-run-id": "0b6e6f1c"}, "env": {"RAY_ADDRESS": "ray://head:10001"}}


def render(template: dict[str, Any] = TEMPLATE, **values: Any) -> dict[str, Any]:
    defaults = {k: v["default"] for k, v in template["variables"]["properties"].items() if "default" in v}
    return apply_values(copy.deepcopy(template["job_configuration"]), {**defaults, **RUN, **values})


def job(**values: Any) -> dict[str, Any]:
    """The Job the worker submits: the rendered manifest, the command split into args and the
    deployment's env put before the template's own list (prefect-kubernetes' job configuration)."""
    config = render(**values)
    manifest, env = config["job_manifest"], config["env"]
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["args"] = shlex.split(container["args"])
    container["env"] = [*({"name": k, "value": v} for k, v in env.items()),
                        *(e for e in container["env"] if e["name"] not in env)]
    manifest["metadata"]["name"] = manifest["metadata"].pop("generateName") + "x"  # the API server's part
    return manifest


def test_every_placeholder_is_a_declared_variable():
    """An undeclared placeholder is left as literal text in the Job (Prefect does not fail on it)."""
    names = {p.name for p in find_placeholders(TEMPLATE["job_configuration"])}
    assert names <= set(TEMPLATE["variables"]["properties"]), names - set(TEMPLATE["variables"]["properties"])
    broken = copy.deepcopy(TEMPLATE)
    broken["job_configuration"]["job_manifest"]["spec"]["activeDeadlineSeconds"] = "{{ deadline }}"
    assert {p.name for p in find_placeholders(broken["job_configuration"])} - set(
        broken["variables"]["properties"]) == {"deadline"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_rendered_job_matches_kubernetes_schema(version):
    rendered = job()
    assert rendered["kind"] == "Job" and rendered["metadata"]["namespace"] == NAMESPACE
    assert core_errors(rendered, version) == []
    assert core_errors({**rendered, "spec": {**rendered["spec"], "backoffLimit": "0"}}, version)


def test_rendered_job_keeps_the_manifests_rules():
    rendered = job()
    assert check_images_pinned(rendered) == []
    assert check_no_inline_secrets(rendered) == []
    assert check_resources(rendered) == []
    assert check_references([*deployed(), rendered], example_secrets()) == []
    assert check_images_pinned(job(image="ghcr.io/quantgate/quantgate"))
    leaked = job()
    leaked["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "QG_JUDGE_API_KEY",
                                                                       "value": "sk-live"})
    assert check_no_inline_secrets(leaked)


def test_flow_runs_share_the_clusters_state_and_image():
    """The flow run's state dir is the claim every Ray node mounts: a run resumed in another pod finds
    its task results (PREFECT_LOCAL_STORAGE_PATH under the state dir) and the workers' checkpoints."""
    spec = job()["spec"]["template"]["spec"]
    cluster = find("RayCluster", "quantgate-raycluster")
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    claim = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in head["volumes"]
             if "persistentVolumeClaim" in v}
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    state_dir = _cluster_conf()["runtime"]["state_dir"]
    pod_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]}
    assert pod_claims[mounts[state_dir]] in claim.values()
    assert spec["containers"][0]["image"] == _container(cluster, "ray-head")["image"]
    env = _env(spec["containers"][0])
    conf = _cluster_conf()
    assert env["MLFLOW_TRACKING_URI"] == conf["runtime"]["mlflow_tracking_uri"]
    key = conf["judge"]["api_key_env"]
    assert env[key] == _env(_container(cluster, "ray-worker"))[key]
    assert env["RAY_ADDRESS"] == RUN["env"]["RAY_ADDRESS"]  # the deployment's, first
    assert spec["automountServiceAccountToken"] is False  # the flow run never calls the Kubernetes API


def test_deployment_env_reaches_the_container():
    """Prefect's worker prepends the rendered `env` (the deployment's job variables) to the template's
    own list: the template must leave `env` to the job configuration, not template it into the list."""
    rendered = render()
    assert rendered["env"] == RUN["env"]
    container = rendered["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    assert isinstance(container["env"], list) and not re.search(r"\{\{", json.dumps(container["env"]))


def test_deploy_registers_the_result_storage_on_the_state_dir(tmp_path):
    from quantgate.tasks.runtime.servers import flow_run_env

    env = flow_run_env(tmp_path / "state", offline=True)
    assert env["PREFECT_LOCAL_STORAGE_PATH"] == str((tmp_path / "state" / "prefect" / "results").resolve())
    assert "PREFECT_HOME" not in env  # each pod keeps its own Prefect home; only results are shared
    assert not [k for k in env if re.search(r"_KEY|TOKEN$|SECRET|PASSWORD", k)]
