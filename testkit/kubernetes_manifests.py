"""The Kubernetes manifests in ``deploy/kubernetes/``, read as data for the tests: every
object, lookups by kind and name, and the environment a container would get."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = MANIFESTS / "kustomization.yaml"
# Placeholder Secrets, applied by nobody: the objects the manifests expect to exist.
SECRETS_EXAMPLE = MANIFESTS / "secrets.example.yaml"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    path: Path
    obj: Obj

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


def manifest_files() -> list[Path]:
    """Every YAML file under deploy/kubernetes/ but the kustomization (not a Kubernetes
    object)."""
    return sorted(p for p in MANIFESTS.rglob("*.yaml") if p != KUSTOMIZATION)


def load_all() -> list[Manifest]:
    return [
        Manifest(path, obj)
        for path in manifest_files()
        for obj in yaml.safe_load_all(path.read_text())
        if obj
    ]


def base(manifests: list[Manifest]) -> list[Manifest]:
    """What kustomization.yaml applies: not optional/ (alternatives and examples), not the
    example Secrets."""
    return [m for m in manifests if m.path.parent == MANIFESTS and m.path != SECRETS_EXAMPLE]


def find(manifests: list[Manifest], kind: str, name: str) -> Obj:
    found = [m.obj for m in manifests if m.kind == kind and m.name == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name!r} in deploy/kubernetes/"
    return found[0]


def pod_spec(workload: Obj) -> Obj:
    return workload["spec"]["template"]["spec"]


def container(workload: Obj, name: str) -> Obj:
    found = [c for c in pod_spec(workload)["containers"] if c["name"] == name]
    assert len(found) == 1, f"no single container {name!r}"
    return found[0]


def env_entries(c: Obj) -> dict[str, Obj]:
    return {entry["name"]: entry for entry in c.get("env", [])}


def key_value(manifests: list[Manifest], kind: str, name: str, key: str) -> str:
    """A key of a ConfigMap (``data``) or Secret (``stringData``) among the manifests."""
    obj = find(manifests, kind, name)
    data = obj.get("data" if kind == "ConfigMap" else "stringData", {})
    assert key in data, f"{kind} {name} has no key {key!r}"
    return str(data[key])


def resolve_env(manifests: list[Manifest], c: Obj, pod_name: str) -> dict[str, str]:
    """The environment Kubernetes would give container ``c`` of pod ``pod_name``: literal
    values, ConfigMap and Secret keys (the Secrets from secrets.example.yaml), the downward
    API's pod name, and ``$(VAR)`` references to variables defined before."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        env |= {k: str(v) for k, v in find(manifests, "ConfigMap", ref)["data"].items()}
    for name, entry in env_entries(c).items():
        if "value" in entry:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), str(entry["value"]))
        else:
            ref = entry["valueFrom"]
            if "fieldRef" in ref:
                fields = {"metadata.name": pod_name, "metadata.namespace": "parley"}
                value = fields[ref["fieldRef"]["fieldPath"]]
            elif "configMapKeyRef" in ref:
                key = ref["configMapKeyRef"]
                value = key_value(manifests, "ConfigMap", key["name"], key["key"])
            else:
                key = ref["secretKeyRef"]
                value = key_value(manifests, "Secret", key["name"], key["key"])
        env[name] = value
    return env
