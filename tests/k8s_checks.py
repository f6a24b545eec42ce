"""The checks behind tests/infra: load the manifests of infra/k8s/, validate them against
Kubernetes' schemas and KubeRay's vendored CRD schemas, and the rules each finding comes from
(images pinned, no secret inline, resources, GPU placement, selectors, references)."""

from __future__ import annotations

import copy
import functools
import json
import re
import tomllib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "infra" / "k8s"
CRDS = K8S / "crds"
EXAMPLE_SECRETS = "secrets.example.yaml"
NAMESPACE = "quantgate"
PLACEHOLDER = "REPLACE_ME"
# The oldest Kubernetes minor we support and the newest this kubernetes-validate release knows.
K8S_VERSIONS = ("1.33", ".".join(kubernetes_validate.latest_version().split(".")[:2]))
GPU = "nvidia.com/gpu"
GPU_PRODUCTS = {"NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3-MIG", "NVIDIA-H100-NVL", "NVIDIA-H200"}

RAY_KINDS = {"RayCluster": "ray.io_rayclusters.v1.schema.json",
             "RayService": "ray.io_rayservices.v1.schema.json"}
# Where each kind keeps its pod templates.
POD_TEMPLATES: dict[str, tuple[tuple[str, ...], ...]] = {
    "Deployment": (("spec", "template"),), "StatefulSet": (("spec", "template"),),
    "DaemonSet": (("spec", "template"),), "Job": (("spec", "template"),),
    "CronJob": (("spec", "jobTemplate", "spec", "template"),),
}
NO_PODS = {"Namespace", "Service", "ServiceAccount", "Role", "RoleBinding", "Secret", "ConfigMap",
           "PersistentVolumeClaim"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}
SECRETISH = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|KEY|CREDENTIAL", re.IGNORECASE)
# user:password@ inside a URL; the password must be a $(VAR) that Kubernetes fills from the env.
URL_USERINFO = re.compile(r"://[^\s/:@]+:([^\s/@]+)@")
ENV_REF = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
IMAGE = re.compile(r"^(?P<name>[^@\s]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?"
                   r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


# ---------------------------------------------------------------------------------------------
# Loading and walking


@functools.cache
def _load() -> tuple[tuple[str, dict[str, Any]], ...]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                docs.append((path.name, doc))
    return tuple(docs)


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """(file name, object) for every object under infra/k8s/*.yaml; copies, free to mutate."""
    return copy.deepcopy(list(_load()))


def objects() -> list[dict[str, Any]]:
    return [obj for _, obj in manifests()]


def ident(file: str, obj: dict[str, Any]) -> str:
    return f"{file}:{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def find(kind: str, name: str, objs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    for obj in objs if objs is not None else objects():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise LookupError(f"{kind}/{name} not in infra/k8s")


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _ray_cluster_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec", {})
    return spec.get("rayClusterConfig", {}) if obj["kind"] == "RayService" else spec


def pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(where, pod template) for each pod template the object carries."""
    kind = obj["kind"]
    if kind in RAY_KINDS:
        spec = _ray_cluster_spec(obj)
        found = [("headGroupSpec", spec.get("headGroupSpec", {}).get("template"))]
        found += [(f"workerGroupSpecs[{g.get('groupName')}]", g.get("template"))
                  for g in spec.get("workerGroupSpecs", [])]
        return [(where, t) for where, t in found if t is not None]
    return [(".".join(p), t) for p in POD_TEMPLATES.get(kind, ()) if (t := _dig(obj, p)) is not None]


def containers(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, container, pod spec) for every container, initContainer and ephemeral container."""
    for where, template in pod_templates(obj):
        spec = template.get("spec", {})
        for field in ("initContainers", "containers", "ephemeralContainers"):
            for c in spec.get(field, []):
                yield f"{obj['kind']}/{obj['metadata']['name']} {where} {field}[{c.get('name')}]", c, spec


# ---------------------------------------------------------------------------------------------
# Schemas


@functools.cache
def _crd_validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((CRDS / RAY_KINDS[kind]).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(closed(schema))


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields rejected, as the API server does under `kubectl apply`'s default
    `--validate=strict` (server-side field validation). KubeRay's schemas list their properties but
    leave `additionalProperties` open (the server prunes unknown fields instead), so a misspelt field
    would pass plain jsonschema. Objects marked x-kubernetes-preserve-unknown-fields stay open."""
    s = dict(schema)
    if "properties" in s:
        s["properties"] = {name: closed(sub) for name, sub in s["properties"].items()}
        if s.get("x-kubernetes-embedded-resource"):
            for name in ("apiVersion", "kind", "metadata"):
                s["properties"].setdefault(name, {})
        if "additionalProperties" not in s and not s.get("x-kubernetes-preserve-unknown-fields"):
            s["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = closed(s["additionalProperties"])
    if isinstance(s.get("items"), dict):
        s["items"] = closed(s["items"])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in s:
            s[key] = [closed(sub) for sub in s[key]]
    return s


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """KubeRay objects against the vendored v1 CRD schema (CEL rules, x-kubernetes-validations,
    are not evaluated)."""
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in _crd_validator(obj["kind"]).iter_errors(obj)]


def core_errors(obj: dict[str, Any], version: str) -> list[str]:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [e.message]
    return []


def as_pod_template(obj: dict[str, Any], where: str, template: dict[str, Any]) -> dict[str, Any]:
    """A KubeRay pod template as a core v1 PodTemplate, to hold it to Kubernetes' own schema too."""
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": re.sub(r"[^a-z0-9-]+", "-", f"{obj['metadata']['name']}-{where}".lower())
                         .strip("-")[:63],
                         "namespace": obj["metadata"].get("namespace")},
            "template": template}


# ---------------------------------------------------------------------------------------------
# Rules: each returns a list of findings, empty when the object complies


def check_images_pinned(obj: dict[str, Any]) -> list[str]:
    """Every image names an explicit tag other than `latest`, or a digest."""
    found = []
    for where, c, _ in containers(obj):
        image = c.get("image", "")
        m = IMAGE.match(image)
        if not m:
            found.append(f"{where}: image {image!r} is not a valid reference")
        elif not m["digest"] and (not m["tag"] or m["tag"] == "latest"):
            found.append(f"{where}: image {image!r} is not pinned (no tag, or `latest`)")
    return found


def _defined_env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def check_no_inline_secrets(obj: dict[str, Any]) -> list[str]:
    """No secret-looking env var holds a literal value; URLs carry no literal password; env refs
    $(VAR) in command/args/env values name a variable the container defines (else Kubernetes leaves
    the text as is)."""
    found = []
    for where, c, _ in containers(obj):
        env = c.get("env", [])
        for e in env:
            if SECRETISH.search(e["name"]) and "value" in e:
                found.append(f"{where}: env {e['name']} has a literal value; use valueFrom.secretKeyRef")
        texts = [*c.get("command", []), *c.get("args", []), *(e.get("value", "") for e in env)]
        defined = set(_defined_env(c))
        for text in texts:
            for password in URL_USERINFO.findall(text):
                if not ENV_REF.fullmatch(password):
                    found.append(f"{where}: a URL carries a literal password: {text!r}")
                elif ENV_REF.fullmatch(password)[1] not in defined:
                    found.append(f"{where}: {password} in a URL is not defined in the container's env")
            for name in ENV_REF.findall(text):
                if name not in defined:
                    found.append(f"{where}: $({name}) is not defined in the container's env")
    return found


def check_secret_objects(file: str, obj: dict[str, Any]) -> list[str]:
    """Secrets appear only in the example file, and there with placeholder values only."""
    if obj["kind"] != "Secret":
        return []
    name = ident(file, obj)
    if file != EXAMPLE_SECRETS:
        return [f"{name}: a Secret outside {EXAMPLE_SECRETS}"]
    found = [f"{name}: `data` holds encoded values; the example uses stringData placeholders"
             for _ in [obj] if obj.get("data")]
    found += [f"{name}: stringData.{key} is not a {PLACEHOLDER} placeholder"
              for key, value in (obj.get("stringData") or {}).items() if PLACEHOLDER not in str(value)]
    if not obj.get("stringData"):
        found.append(f"{name}: no stringData keys: the example should show the Secret's shape")
    return found


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"m": Decimal("0.001"), "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
            "E": 10**18}


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("500m", "2", "16Gi") as a number."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?", str(value))
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    return Decimal(m[1]) * (_BINARY.get(m[2] or "") or _DECIMAL[m[2] or ""])


def check_resources(obj: dict[str, Any]) -> list[str]:
    """Requests and limits for cpu and memory on every container, requests <= limits; a GPU is in
    limits, and equal to its request when both name it (Kubernetes' rule for extended resources)."""
    found = []
    for where, c, _ in containers(obj):
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for side, values in (("requests", requests), ("limits", limits)):
            found += [f"{where}: no resources.{side}.{r}" for r in ("cpu", "memory") if r not in values]
        for r in ("cpu", "memory"):
            try:
                if r in requests and r in limits and quantity(requests[r]) > quantity(limits[r]):
                    found.append(f"{where}: requests.{r} {requests[r]} > limits.{r} {limits[r]}")
            except ValueError as e:
                found.append(f"{where}: {e}")
        if GPU in requests and GPU not in limits:
            found.append(f"{where}: {GPU} requested without a limit")
        if GPU in requests and GPU in limits and quantity(requests[GPU]) != quantity(limits[GPU]):
            found.append(f"{where}: {GPU} request {requests[GPU]} != limit {limits[GPU]}")
    return found


def gpus(c: dict[str, Any]) -> int:
    return int(quantity(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)))


def check_gpu_placement(obj: dict[str, Any]) -> list[str]:
    """Pods that take a GPU land on H100/H200 nodes only and tolerate the GPU nodes' taint."""
    found = []
    for where, template in pod_templates(obj):
        spec = template.get("spec", {})
        if not any(gpus(c) for c in spec.get("containers", []) + spec.get("initContainers", [])):
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']} {where}"
        products = set()
        selector = (spec.get("nodeSelector") or {}).get(f"{GPU}.product")
        if selector:
            products.add(selector)
        terms = _dig(spec, ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                            "nodeSelectorTerms")) or []
        for term in terms:
            for expr in term.get("matchExpressions", []):
                if expr.get("key") == f"{GPU}.product" and expr.get("operator") == "In":
                    products |= set(expr.get("values", []))
        if not products:
            found.append(f"{name}: takes a GPU but does not select {GPU}.product")
        elif not products <= GPU_PRODUCTS:
            found.append(f"{name}: GPU products {sorted(products - GPU_PRODUCTS)} are not H100/H200")
        if not any(t.get("key") == GPU and t.get("operator") in ("Exists", "Equal")
                   for t in spec.get("tolerations", [])):
            found.append(f"{name}: takes a GPU but does not tolerate the {GPU} taint")
    return found


def check_namespace(obj: dict[str, Any]) -> list[str]:
    meta = obj.get("metadata", {})
    if obj["kind"] == "Namespace":
        return [] if meta.get("name") == NAMESPACE else [f"Namespace/{meta.get('name')}: not {NAMESPACE}"]
    if obj["kind"] in CLUSTER_SCOPED:
        return [f"{obj['kind']}/{meta.get('name')}: cluster-scoped; keep everything in {NAMESPACE}"]
    if meta.get("namespace") != NAMESPACE:
        return [f"{obj['kind']}/{meta.get('name')}: namespace {meta.get('namespace')!r}, not {NAMESPACE!r}"]
    return []


def _pods(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(obj["metadata"].get("namespace"), obj, t) for obj in objs for _, t in pod_templates(obj)]


def check_service_selectors(objs: list[dict[str, Any]]) -> list[str]:
    """Every Service selects the pods of some template in its namespace, and its named target ports
    are ports those pods declare."""
    found = []
    pods = _pods(objs)
    for svc in (o for o in objs if o["kind"] == "Service"):
        ns, name = svc["metadata"].get("namespace"), svc["metadata"]["name"]
        selector = svc.get("spec", {}).get("selector") or {}
        if not selector:
            found.append(f"Service/{name}: no selector")
            continue
        chosen = [t for pod_ns, _, t in pods if pod_ns == ns
                  and selector.items() <= ((t.get("metadata") or {}).get("labels") or {}).items()]
        if not chosen:
            found.append(f"Service/{name}: selector {selector} matches no pod template in {ns}")
            continue
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort")
            if isinstance(target, str) and not any(
                    p.get("name") == target for t in chosen for c in t["spec"].get("containers", [])
                    for p in c.get("ports", [])):
                found.append(f"Service/{name}: targetPort {target!r} is no named port of its pods")
    return found


def check_references(objs: list[dict[str, Any]], secrets: list[dict[str, Any]]) -> list[str]:
    """Names that must resolve do: Secrets and keys (in the example), ConfigMaps, claims, service
    accounts, a StatefulSet's Service, a RoleBinding's Role and subjects."""
    have = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objs}
    secret_keys = {(s["metadata"].get("namespace"), s["metadata"]["name"]): set(s.get("stringData") or {})
                   for s in secrets}
    found = []
    for obj in objs:
        ns = obj["metadata"].get("namespace")
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        for where, c, _ in containers(obj):
            for e in c.get("env", []):
                ref = _dig(e, ("valueFrom", "secretKeyRef"))
                if ref and ref["key"] not in secret_keys.get((ns, ref["name"]), set()):
                    found.append(f"{where}: secret {ref['name']}/{ref['key']} is not in {EXAMPLE_SECRETS}")
        for where, template in pod_templates(obj):
            spec = template.get("spec", {})
            claims = {t["metadata"]["name"] for t in obj.get("spec", {}).get("volumeClaimTemplates", [])}
            for v in spec.get("volumes", []):
                if (claim := _dig(v, ("persistentVolumeClaim", "claimName"))) and \
                        ("PersistentVolumeClaim", ns, claim) not in have:
                    found.append(f"{label} {where}: claim {claim} is not defined")
                if (cm := _dig(v, ("configMap", "name"))) and ("ConfigMap", ns, cm) not in have:
                    found.append(f"{label} {where}: ConfigMap {cm} is not defined")
            mounted = {v["name"] for v in spec.get("volumes", [])} | claims
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                found += [f"{label} {where}: volumeMount {m['name']} has no volume"
                          for m in c.get("volumeMounts", []) if m["name"] not in mounted]
            sa = spec.get("serviceAccountName")
            if sa and ("ServiceAccount", ns, sa) not in have:
                found.append(f"{label} {where}: ServiceAccount {sa} is not defined")
        if obj["kind"] == "StatefulSet" and ("Service", ns, obj["spec"]["serviceName"]) not in have:
            found.append(f"{label}: serviceName {obj['spec']['serviceName']} is no Service")
        if obj["kind"] == "RoleBinding":
            if (obj["roleRef"]["kind"], ns, obj["roleRef"]["name"]) not in have:
                found.append(f"{label}: roleRef {obj['roleRef']['name']} is not defined")
            found += [f"{label}: subject {s['kind']}/{s['name']} is not defined"
                      for s in obj.get("subjects", [])
                      if (s["kind"], s.get("namespace", ns), s["name"]) not in have]
    return found


# ---------------------------------------------------------------------------------------------
# Fixtures' data


ALL = manifests()
CORE = [(f, o) for f, o in ALL if o["kind"] not in RAY_KINDS]
RAY = [(f, o) for f, o in ALL if o["kind"] in RAY_KINDS]
RAY_TEMPLATES = [(ident(f, o), o, where, t) for f, o in RAY for where, t in pod_templates(o)]


def deployed() -> list[dict[str, Any]]:
    """What gets applied: everything but the example Secrets."""
    return [o for f, o in manifests() if f != EXAMPLE_SECRETS]


def example_secrets() -> list[dict[str, Any]]:
    return [o for f, o in manifests() if f == EXAMPLE_SECRETS and o["kind"] == "Secret"]


def _container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for _, c, _ in containers(obj) if c["name"] == name)


def _env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def _pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = {"quantgate": project["version"]}
    for dep in project["dependencies"]:
        if m := re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^;\s]+)", dep.strip()):
            pins[m[1].lower()] = m[2]
    return pins


def _cluster_conf() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "conf" / "cluster.yaml").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The files and their objects
