"""Offline checks of the cluster profile's manifests (infra/k8s/).

Every object is checked against Kubernetes' own OpenAPI schemas (kubernetes-validate, strict: an
unknown field fails) or, for KubeRay's RayCluster / RayService, against the CRD schemas vendored in
infra/k8s/crds/; then against our rules: images pinned, no secret inline, requests and limits on
every container, Services that select some pod, references that resolve, and the addresses that
conf/cluster.yaml names. Each rule is a small check function that returns its findings; each has a
test that feeds it a broken copy and expects a finding. No network, no cluster.
"""


from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
import yaml
from k8s_checks import (
    ALL,
    CORE,
    EXAMPLE_SECRETS,
    GPU,
    K8S,
    K8S_VERSIONS,
    NAMESPACE,
    NO_PODS,
    POD_TEMPLATES,
    RAY,
    RAY_KINDS,
    RAY_TEMPLATES,
    _container,
    as_pod_template,
    check_gpu_placement,
    check_images_pinned,
    check_namespace,
    check_no_inline_secrets,
    check_references,
    check_resources,
    check_secret_objects,
    check_service_selectors,
    containers,
    core_errors,
    crd_errors,
    deployed,
    example_secrets,
    find,
    gpus,
    ident,
    manifests,
    objects,
    pod_templates,
    quantity,
)


def test_layout():
    names = {p.name for p in K8S.glob("*.yaml")}
    assert {"namespace.yaml", "raycluster.yaml", "rayservice.yaml", "prefect.yaml", "mlflow.yaml",
            "vllm.yaml", EXAMPLE_SECRETS} <= names
    kinds = {o["kind"] for o in objects()}
    unknown = kinds - NO_PODS - set(POD_TEMPLATES) - set(RAY_KINDS)
    assert not unknown, f"kinds these checks do not walk yet (add their pod templates): {unknown}"
    for f, o in ALL:
        assert o["kind"] in RAY_KINDS or not o["apiVersion"].startswith("ray.io"), ident(f, o)
        assert o["apiVersion"] == "ray.io/v1" or o["kind"] not in RAY_KINDS, ident(f, o)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("file, obj", CORE, ids=[ident(f, o) for f, o in CORE])
def test_core_objects_match_kubernetes_schema(file, obj, version):
    assert core_errors(obj, version) == []


@pytest.mark.parametrize("file, obj", RAY, ids=[ident(f, o) for f, o in RAY])
def test_kuberay_objects_match_crd_schema(file, obj):
    assert crd_errors(obj) == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("label, obj, where, template", RAY_TEMPLATES,
                         ids=[f"{r[0]} {r[2]}" for r in RAY_TEMPLATES])
def test_kuberay_pod_templates_match_kubernetes_schema(label, obj, where, template, version):
    assert core_errors(as_pod_template(obj, where, template), version) == []


def test_every_object_in_the_namespace():
    assert [f for o in objects() for f in check_namespace(o)] == []
    assert any(o["kind"] == "Namespace" for o in objects())


def test_images_pinned():
    assert [f for o in objects() for f in check_images_pinned(o)] == []


def test_no_secrets_inline():
    assert [f for o in objects() for f in check_no_inline_secrets(o)] == []
    assert [f for file, o in manifests() for f in check_secret_objects(file, o)] == []


def test_resources_set():
    assert [f for o in objects() for f in check_resources(o)] == []
    assert any(gpus(c) for o in objects() for _, c, _ in containers(o)), "no GPU container at all?"


def test_gpu_pods_placed_on_h100_h200():
    assert [f for o in objects() for f in check_gpu_placement(o)] == []


def test_services_select_pods():
    assert check_service_selectors(deployed()) == []


def test_references_resolve():
    assert check_references(deployed(), example_secrets()) == []


# ---------------------------------------------------------------------------------------------
# Each rule fails on a broken copy


def _broken(kind: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    objs = deployed()
    return find(kind, name, objs), objs


def test_crd_schema_rejects_wrong_types_and_misspelt_fields():
    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert any("replicas" in e and "'two' is not of type 'integer'" in e for e in crd_errors(rc))

    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    rc["spec"]["headGroupSpec"]["rayStartParams"] = "num-cpus=0"
    assert any("rayStartParams" in e and "not of type 'object'" in e for e in crd_errors(rc))

    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    rc["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0   # values are strings
    assert any("rayStartParams.num-cpus" in e for e in crd_errors(rc))

    rs, _ = _broken("RayService", "quantgate-serve")
    rs["spec"]["rayClusterConfig"]["workerGroupSpec"] = rs["spec"]["rayClusterConfig"].pop("workerGroupSpecs")
    assert any("'workerGroupSpec' was unexpected" in e for e in crd_errors(rs))

    rs, _ = _broken("RayService", "quantgate-serve")
    del rs["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert any("'headGroupSpec' is a required property" in e for e in crd_errors(rs))

    rs, _ = _broken("RayService", "quantgate-serve")
    rs["spec"]["serveConfigV2"] = yaml.safe_load(rs["spec"]["serveConfigV2"])   # must stay a string
    assert any("serveConfigV2" in e for e in crd_errors(rs))


def test_kubernetes_schema_rejects_wrong_types_and_misspelt_fields():
    dep, _ = _broken("Deployment", "mlflow")
    dep["spec"]["replicas"] = "two"
    assert any("'two' is not of type 'integer'" in e for e in core_errors(dep, K8S_VERSIONS[0]))
    dep, _ = _broken("Deployment", "mlflow")
    dep["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    assert any("'imagee' was unexpected" in e for e in core_errors(dep, K8S_VERSIONS[0]))
    sts, _ = _broken("StatefulSet", "postgres")
    sts["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = 1   # env values are strings
    assert core_errors(sts, K8S_VERSIONS[0])
    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    where, template = pod_templates(rc)[0]
    template["spec"]["containers"][0]["resource"] = template["spec"]["containers"][0].pop("resources")
    errors = core_errors(as_pod_template(rc, where, template), K8S_VERSIONS[0])
    assert any("'resource' was unexpected" in e for e in errors)


def test_check_images_pinned_reports():
    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    assert check_images_pinned(rc) == []
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["image"] = "ghcr.io/quantgate/quantgate:latest"
    head["initContainers"] = [{"name": "wait", "image": "busybox"}]
    found = check_images_pinned(rc)
    assert len(found) == 2
    assert any("quantgate:latest" in f for f in found) and any("'busybox'" in f for f in found)
    head["containers"][0]["image"] = "localhost:5000/quantgate"   # a registry port is not a tag
    head["initContainers"][0]["image"] = "busybox@sha256:" + "a" * 64
    assert len(check_images_pinned(rc)) == 1


def test_check_no_inline_secrets_reports():
    sts, _ = _broken("StatefulSet", "postgres")
    assert check_no_inline_secrets(sts) == []
    env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "POSTGRES_PASSWORD").update({"value": "hunter2"})
    assert any("POSTGRES_PASSWORD has a literal value" in f for f in check_no_inline_secrets(sts))

    dep, _ = _broken("Deployment", "mlflow")
    mlflow = dep["spec"]["template"]["spec"]["containers"][0]
    mlflow["args"] = [a.replace("$(POSTGRES_PASSWORD)", "hunter2") for a in mlflow["args"]]
    assert any("literal password" in f for f in check_no_inline_secrets(dep))
    mlflow["env"] = [e for e in mlflow["env"] if e["name"] != "POSTGRES_USER"]
    assert any("$(POSTGRES_USER) is not defined" in f for f in check_no_inline_secrets(dep))

    secret = copy.deepcopy(example_secrets()[0])
    assert check_secret_objects(EXAMPLE_SECRETS, secret) == []
    assert check_secret_objects("mlflow.yaml", secret) != []
    secret["stringData"]["password"] = "hunter2"
    assert check_secret_objects(EXAMPLE_SECRETS, secret) == [
        f"{EXAMPLE_SECRETS}:Secret/quantgate-postgres: stringData.password is not a REPLACE_ME placeholder"]
    secret["data"] = {"password": "aHVudGVyMg=="}
    assert len(check_secret_objects(EXAMPLE_SECRETS, secret)) == 2


def test_check_resources_reports():
    dep, _ = _broken("Deployment", "vllm")
    assert check_resources(dep) == []
    res = dep["spec"]["template"]["spec"]["containers"][0]["resources"]
    del res["limits"]["memory"]
    res["requests"]["cpu"] = "64"
    res["requests"][GPU] = "1"
    found = check_resources(dep)
    assert any("no resources.limits.memory" in f for f in found)
    assert any("requests.cpu 64 > limits.cpu 32" in f for f in found)
    assert any(f"{GPU} request 1 != limit 2" in f for f in found)
    del res["limits"]
    assert len([f for f in check_resources(dep) if "no resources.limits" in f]) == 2
    assert quantity("500m") == Decimal("0.5") and quantity("2Gi") == 2 * 2**30 and quantity(4) == 4


def test_check_gpu_placement_reports():
    rc, _ = _broken("RayCluster", "quantgate-raycluster")
    assert check_gpu_placement(rc) == []
    spec = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    spec["tolerations"] = []
    expr = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    expr["values"].append("Tesla-T4")
    found = check_gpu_placement(rc)
    assert any("Tesla-T4" in f for f in found) and any("tolerate" in f for f in found)
    del spec["affinity"]
    assert any("does not select" in f for f in check_gpu_placement(rc))


def test_check_namespace_reports():
    dep, _ = _broken("Deployment", "prefect-worker")
    assert check_namespace(dep) == []
    del dep["metadata"]["namespace"]
    assert check_namespace(dep) != []
    assert check_namespace({"kind": "ClusterRole", "metadata": {"name": "x"}}) != []


def test_check_service_selectors_reports():
    svc, objs = _broken("Service", "mlflow")
    svc["spec"]["selector"] = {"app.kubernetes.io/name": "mlfow"}
    assert check_service_selectors(objs) == [
        "Service/mlflow: selector {'app.kubernetes.io/name': 'mlfow'} matches no pod template in "
        f"{NAMESPACE}"]
    svc, objs = _broken("Service", "vllm")
    svc["spec"]["ports"][0]["targetPort"] = "https"
    assert check_service_selectors(objs) == ["Service/vllm: targetPort 'https' is no named port of its pods"]
    svc, objs = _broken("Service", "postgres")
    svc["metadata"]["namespace"] = "default"   # the pods are in another namespace
    assert len(check_service_selectors(objs)) == 1


def test_check_references_reports():
    objs = deployed()
    secrets = example_secrets()
    find("Deployment", "prefect-worker", objs)["spec"]["template"]["spec"]["serviceAccountName"] = "prefect"
    find("RoleBinding", "prefect-worker", objs)["roleRef"]["name"] = "prefect"
    vllm_env = _container(find("Deployment", "vllm", objs), "vllm")["env"]
    ref = next(e for e in vllm_env if e["name"] == "VLLM_API_KEY")
    ref["valueFrom"]["secretKeyRef"]["key"] = "token"
    postgres_pod = find("StatefulSet", "postgres", objs)["spec"]["template"]["spec"]
    postgres_pod["volumes"][0]["configMap"]["name"] = "init"
    found = check_references(objs, secrets)
    assert len(found) == 4, found
    for broken in ("ServiceAccount prefect", "roleRef prefect", "quantgate-judge/token", "ConfigMap init"):
        assert any(broken in f for f in found), (broken, found)


# ---------------------------------------------------------------------------------------------
# What runs, against the rest of the repository
