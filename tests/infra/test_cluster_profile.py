"""The cluster profile as the manifests define it: server versions that match the client pins,
conf/cluster.yaml pointing at the Services, the variants fitting a GPU worker, the Prefect worker
confined to its namespace, MLflow on its stores, and the Ray Serve application's arguments."""


from __future__ import annotations

import importlib
import inspect
import json
import re
from decimal import Decimal
from typing import Any
from urllib.parse import urlparse

import yaml
from k8s_checks import (
    CRDS,
    NAMESPACE,
    RAY_KINDS,
    ROOT,
    _cluster_conf,
    _container,
    _env,
    _pins,
    _ray_cluster_spec,
    containers,
    find,
    gpus,
    objects,
    quantity,
)


def test_versions_match_the_client_pins():
    pins = _pins()
    objs = objects()
    for obj in (o for o in objs if o["kind"] in RAY_KINDS):
        assert _ray_cluster_spec(obj)["rayVersion"] == pins["ray"], obj["metadata"]["name"]
    ray_images = {c["image"] for o in objs if o["kind"] in RAY_KINDS for _, c, _ in containers(o)}
    assert ray_images == {f"ghcr.io/quantgate/quantgate:{pins['quantgate']}"}
    assert _container(find("Deployment", "prefect-server"), "prefect-server")["image"] == \
        f"prefecthq/prefect:{pins['prefect']}-python3.11"
    assert _container(find("Deployment", "prefect-worker"), "prefect-worker")["image"] == \
        f"prefecthq/prefect:{pins['prefect']}-python3.11-kubernetes"
    assert _container(find("Deployment", "mlflow"), "mlflow")["image"] == \
        f"ghcr.io/mlflow/mlflow:v{pins['mlflow']}-full"
    postgres = _container(find("StatefulSet", "postgres"), "postgres")["image"]
    assert re.fullmatch(r"postgres:15\.\d+", postgres)
    vllm = _container(find("Deployment", "vllm"), "vllm")["image"]
    assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", vllm)


def test_ray_telemetry_off_and_head_reachable():
    for obj in (o for o in objects() if o["kind"] in RAY_KINDS):
        for where, c, _ in containers(obj):
            assert _env(c).get("RAY_USAGE_STATS_ENABLED") == "0", where
        head = _ray_cluster_spec(obj)["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0"
        # KubeRay builds the head Service from the head container's ports, found by these names.
        ports = {p["name"]: p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
        assert ports.items() >= {"gcs-server": 6379, "dashboard": 8265, "client": 10001}.items()
    # The operator submits serveConfigV2 through the RayService head's dashboard.
    rs = find("RayService", "quantgate-serve")
    assert rs["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["dashboard-host"] == "0.0.0.0"


def test_cluster_conf_points_at_the_services():
    conf = _cluster_conf()
    rc = find("RayCluster", "quantgate-raycluster")
    assert conf["runtime"]["ray_address"] == \
        f"ray://{rc['metadata']['name']}-head-svc.{rc['metadata']['namespace']}.svc:10001"

    def service_at(url: str) -> dict[str, Any]:
        u = urlparse(url)
        name, ns, svc_word = u.hostname.split(".")[:3]
        assert svc_word == "svc", url
        svc = find("Service", name)
        assert svc["metadata"]["namespace"] == ns, url
        assert u.port in [p["port"] for p in svc["spec"]["ports"]], url
        return svc

    assert service_at(conf["judge"]["base_url"])["metadata"]["name"] == "vllm"
    assert service_at(conf["runtime"]["mlflow_tracking_uri"])["metadata"]["name"] == "mlflow"
    for obj in (o for o in objects() if o["kind"] in RAY_KINDS):
        for where, c, _ in containers(obj):
            env = _env(c)
            assert env["MLFLOW_TRACKING_URI"] == conf["runtime"]["mlflow_tracking_uri"], where
            if "PREFECT_API_URL" in env:
                assert service_at(env["PREFECT_API_URL"])["metadata"]["name"] == "prefect-server"
    # Every node of the cluster the flow's tasks run on: a judge call asks for no CPU, so Ray may place
    # it on the num-cpus 0 head as well as on a worker.
    cluster = find("RayCluster", "quantgate-raycluster")
    for name in ("ray-head", "ray-worker"):
        assert _env(_container(cluster, name))[conf["judge"]["api_key_env"]] == {
            "secretKeyRef": {"name": "quantgate-judge", "key": "api-key"}}, name


def test_cluster_conf_loads():
    from quantgate.conf.load import load_config

    config = load_config(ROOT / "conf" / "cluster.yaml")
    assert config.runtime.ray_address.startswith("ray://")


def test_variants_fit_a_gpu_worker():
    worker = _container(find("RayCluster", "quantgate-raycluster"), "ray-worker")
    limits = worker["resources"]["limits"]
    cpus, memory, gpu = quantity(limits["cpu"]), quantity(limits["memory"]), gpus(worker)
    conf = _cluster_conf()
    asks = [(v["name"], v.get("resources", {})) for v in conf["variants"]]
    asks += [(s, {"num_cpus": conf[s]["num_cpus"]}) for s in ("eval", "lmeval", "bench") if s in conf]
    for name, r in asks:
        assert r.get("num_cpus", 1) <= cpus, name
        assert r.get("num_gpus", 0) <= gpu, name
        # Ray keeps ~30% of a node's memory for the object store; the rest is its `memory` resource.
        assert Decimal(r.get("memory_gb", 0)) * 2**30 <= memory * Decimal("0.7"), name


def test_vllm_serves_the_judge_model_on_its_gpus():
    conf = _cluster_conf()
    c = _container(find("Deployment", "vllm"), "vllm")
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"] if a.startswith("--"))
    assert c["command"] == ["vllm", "serve"] and not c["args"][0].startswith("--")
    assert args["served-model-name"] == conf["judge"]["model"]
    assert int(args["tensor-parallel-size"]) == gpus(c) >= 1
    assert args["host"] == "0.0.0.0"
    assert int(args["port"]) == find("Service", "vllm")["spec"]["ports"][0]["port"]
    assert _env(c)["VLLM_API_KEY"] == {"secretKeyRef": {"name": "quantgate-judge", "key": "api-key"}}


def test_prefect_server_and_worker():
    server = _container(find("Deployment", "prefect-server"), "prefect-server")
    assert server["command"][:5] == ["prefect", "server", "start", "--host", "0.0.0.0"]
    env = _env(server)
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert env["PREFECT_API_DATABASE_CONNECTION_URL"] == {
        "secretKeyRef": {"name": "quantgate-prefect-db", "key": "connection-url"}}
    worker = _container(find("Deployment", "prefect-worker"), "prefect-worker")
    cmd = worker["command"]
    assert cmd[:3] == ["prefect", "worker", "start"]
    assert cmd[cmd.index("--pool") + 1] == "quantgate-k8s" and cmd[cmd.index("--type") + 1] == "kubernetes"
    assert _env(worker)["PREFECT_API_URL"] == "http://prefect-server.quantgate.svc:4200/api"


def test_prefect_worker_may_run_jobs_in_its_namespace_only():
    objs = objects()
    assert not [o for o in objs if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    sa = find("Deployment", "prefect-worker", objs)["spec"]["template"]["spec"]["serviceAccountName"]
    binding = next(o for o in objs if o["kind"] == "RoleBinding"
                   and {"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE} in o["subjects"])
    role = find("Role", binding["roleRef"]["name"], objs)
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   for r in role["rules"])

    assert all(allowed("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete"))
    assert all(allowed("", "pods", v) for v in ("get", "list", "watch"))
    assert allowed("", "pods/log", "get")
    assert not any("*" in r["verbs"] or "*" in r["resources"] for r in role["rules"])


def test_mlflow_server_and_its_stores():
    c = _container(find("Deployment", "mlflow"), "mlflow")
    assert c["command"] == ["mlflow", "server"]
    args = dict(a.removeprefix("--").split("=", 1) for a in c["args"])
    uri = urlparse(args["backend-store-uri"])
    assert uri.scheme == "postgresql" and uri.hostname == "postgres.quantgate.svc" and uri.port == 5432
    assert args["artifacts-destination"] == "s3://quantgate-mlflow/"
    env = _env(c)
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    s3 = urlparse(env["MLFLOW_S3_ENDPOINT_URL"])
    minio = find("Service", s3.hostname.split(".")[0])
    assert s3.port in [p["port"] for p in minio["spec"]["ports"]]
    assert env["AWS_ACCESS_KEY_ID"]["secretKeyRef"]["name"] == "quantgate-s3"
    assert env["AWS_SECRET_ACCESS_KEY"]["secretKeyRef"]["name"] == "quantgate-s3"
    assert "quantgate-mlflow" in _container(find("Job", "minio-make-bucket"), "mc")["args"][0]
    pg = find("StatefulSet", "postgres")
    assert pg["spec"]["volumeClaimTemplates"] and \
        _env(_container(pg, "postgres"))["POSTGRES_PASSWORD"]["secretKeyRef"]["name"] == "quantgate-postgres"


# ---------------------------------------------------------------------------------------------
# The RayService's Serve application against tasks/serving/app.py (read, not imported: no Ray here)


def _serve_app() -> dict[str, Any]:
    serve_config = yaml.safe_load(find("RayService", "quantgate-serve")["spec"]["serveConfigV2"])
    (app,) = serve_config["applications"]
    return app


def test_rayservice_app_args_match_the_serving_spec():
    from quantgate.tasks.serving.app import spec_from_args

    app = _serve_app()
    assert app["import_path"] == "quantgate.tasks.serving.app:app_from_args"
    spec, _ = spec_from_args(app["args"])  # a misspelt or missing field raises here
    served, conf = _cluster_conf()["model"]["served_name"], _cluster_conf()
    for role, arm in (("champion", spec.champion), ("canary", spec.canary)):
        assert arm.model_uri == f"models:/{served}@{role}"
        assert arm.path.startswith(conf["runtime"]["state_dir"] + "/")
    assert spec.app_name == app["name"] == f"quantgate-{served}"
    assert served in spec.model_names


def test_rayservice_import_path_is_a_serve_app_builder():
    """Serve's config deploys call the import path's builder with one argument, the args dict."""
    module, attr = _serve_app()["import_path"].split(":")
    params = inspect.signature(getattr(importlib.import_module(module), attr)).parameters
    assert len(params) == 1


def test_vendored_crds_name_their_origin():
    readme = (CRDS / "README.md").read_text(encoding="utf-8")
    for kind, file in RAY_KINDS.items():
        comment = json.loads((CRDS / file).read_text(encoding="utf-8"))["$comment"]
        tag, commit = re.search(r"KubeRay (v[\d.]+) \(commit ([0-9a-f]{40})\)", comment).groups()
        assert tag in readme and commit in readme and "Apache-2.0" in comment, kind
        assert kind.lower() + "s.yaml" in comment


def test_rayservice_args_build_the_serving_spec():
    from quantgate.tasks.serving.app import spec_from_args

    spec, shares = spec_from_args(_serve_app()["args"])
    assert spec.champion.model_uri.endswith("@champion") and spec.canary.model_uri.endswith("@canary")
    assert shares == {"weight": 0.05, "mirror_share": 0.0, "shadow_share": 0.0}


def test_dockerfile_builds_the_pinned_image_from_every_package_folder():
    """The image the manifests name: Ray's image at our Ray pin, and every folder the package is built
    from copied in (a folder left out installs a quantgate without it)."""
    import tomllib

    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    pins = _pins()
    assert re.search(rf"^FROM rayproject/ray:{re.escape(pins['ray'])}-py311-gpu$", text, re.M), "FROM"
    assert f"ghcr.io/quantgate/quantgate:{pins['quantgate']}" in text
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    copied = set(re.findall(r"^COPY --chown=\S+ (\S+) \1$", text, re.M))
    tops = {d.split("/")[0] for d in package_dirs.values()}
    assert tops <= copied, tops - copied
