"""deploy/kubernetes/ made playable by ``podman kube play`` (Debian's podman 4.3), for
``make kube-test`` (deploy/kube_play_test.py): what kustomize, the StatefulSet controller
and the kubelet would make of the committed files, and nothing else.

- :func:`render` does kustomization.yaml's work: its resources, namespace and images;
- :func:`statefulset_pods` does the StatefulSet controller's: pods ``<name>-<i>`` from the
  template, each with its claims ``<claim>-<name>-<i>`` (podman plays no StatefulSet);
- :func:`expand_references` does the kubelet's ``$(VAR)`` expansion of env values (podman
  passes them on as written);
- :func:`podman_secret` is a Secret as podman's ``secretKeyRef`` reads it: a podman secret
  holding the data as a JSON map of base64 values (podman plays no Secret).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from testkit.kubernetes_manifests import KUSTOMIZATION, MANIFESTS

Obj = dict[str, Any]

# What render() applies; anything else in kustomization.yaml must not be silently skipped.
KUSTOMIZE_FIELDS = {"apiVersion", "kind", "namespace", "resources", "images"}
CLUSTER_SCOPED = {"Namespace"}
WORKLOADS = {"Pod", "Deployment", "StatefulSet"}
# $$ is a literal $; $(NAME) a variable defined before (else left as written).
REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def pod_template_spec(obj: Obj) -> Obj:
    return obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]


def containers(obj: Obj) -> Iterator[Obj]:
    """Every container of a workload (init containers too); nothing for other kinds."""
    if obj["kind"] in WORKLOADS:
        spec = pod_template_spec(obj)
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def split_image(image: str) -> tuple[str, str]:
    """``name``, ``tag`` (a registry's ``:port`` is part of the name)."""
    head, _, last = image.rpartition("/")
    if ":" not in last:
        return image, ""
    name, tag = last.rsplit(":", 1)
    return f"{head}/{name}" if head else name, tag


def set_image(image: str, entries: Mapping[str, Obj]) -> str:
    """kustomize's images transformer: ``newName``/``newTag`` of the entry named as the image."""
    name, tag = split_image(image)
    entry = entries.get(name)
    if entry is None:
        return image
    new_tag = entry.get("newTag", tag)
    return entry.get("newName", name) + (f":{new_tag}" if new_tag else "")


def render(images: Mapping[str, str] | None = None) -> list[Obj]:
    """The objects ``kubectl apply -k deploy/kubernetes`` applies, in order. ``images``:
    ``{"parley": "localhost/parley:test"}`` as ``kustomize edit set image
    parley=localhost/parley:test`` would set it."""
    kustomization = yaml.safe_load(KUSTOMIZATION.read_text())
    unknown = set(kustomization) - KUSTOMIZE_FIELDS
    if unknown:
        raise ValueError(f"kustomization.yaml uses {sorted(unknown)}, which render() skips")
    entries = {entry["name"]: dict(entry) for entry in kustomization.get("images", [])}
    for name, image in (images or {}).items():
        new_name, new_tag = split_image(image)
        entries[name] = {"name": name, "newName": new_name, "newTag": new_tag}
    namespace = kustomization.get("namespace")
    objects = []
    for resource in kustomization["resources"]:
        for obj in yaml.safe_load_all((MANIFESTS / resource).read_text()):
            if not obj:
                continue
            if namespace and obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
            for c in containers(obj):
                c["image"] = set_image(c["image"], entries)
            objects.append(obj)
    return objects


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise LookupError(f"{len(found)} {kind} named {name!r}")
    return found[0]


def statefulset_pods(sts: Obj) -> list[Obj]:
    """The pods and claims the StatefulSet controller makes for ``spec.replicas``: pod
    ``<name>-<i>`` is the template with that name, the pod-name and pod-index labels,
    ``hostname`` and ``subdomain`` (the headless Service's name), and a
    ``persistentVolumeClaim`` volume per claim template, claim ``<claim>-<name>-<i>``."""
    meta, spec = sts["metadata"], sts["spec"]
    made: list[Obj] = []
    for ordinal in range(spec.get("replicas", 1)):
        name = f"{meta['name']}-{ordinal}"
        template = copy.deepcopy(spec["template"])
        labels = template["metadata"].setdefault("labels", {})
        labels |= {
            "statefulset.kubernetes.io/pod-name": name,
            "apps.kubernetes.io/pod-index": str(ordinal),
        }
        pod_meta = {**template["metadata"], "name": name}
        if "namespace" in meta:
            pod_meta["namespace"] = meta["namespace"]
        pod_spec = {**template["spec"], "hostname": name, "subdomain": spec["serviceName"]}
        volumes = pod_spec.setdefault("volumes", [])
        for claim in spec.get("volumeClaimTemplates", []):
            claim_name = f"{claim['metadata']['name']}-{name}"
            claim_meta = {**copy.deepcopy(claim["metadata"]), "name": claim_name}
            if "namespace" in meta:
                claim_meta["namespace"] = meta["namespace"]
            made.append(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": claim_meta,
                    "spec": copy.deepcopy(claim["spec"]),
                }
            )
            volumes.append(
                {
                    "name": claim["metadata"]["name"],
                    "persistentVolumeClaim": {"claimName": claim_name},
                }
            )
        made.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec})
    return made


def secret_data(secret: Obj) -> dict[str, str]:
    """A Secret's values, decoded: ``data`` (base64) and ``stringData`` (which wins)."""
    values = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
    return values | {k: str(v) for k, v in secret.get("stringData", {}).items()}


def podman_secret(secret: Obj) -> bytes:
    """What ``podman secret create NAME -`` must hold for podman 4.3's ``secretKeyRef`` to
    find the Secret's keys: a JSON map of base64 values (it reads no Secret object)."""
    values = secret_data(secret)
    return json.dumps(
        {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    ).encode()


def _data(obj: Obj) -> dict[str, str]:
    """A ConfigMap's or a Secret's values, as strings."""
    if obj["kind"] == "Secret":
        return secret_data(obj)
    return {k: str(v) for k, v in obj.get("data", {}).items()}


def _source_value(ref: Obj, meta: Obj, objects: list[Obj]) -> str | None:
    """An env entry's ``valueFrom``, or None when it is optional and missing."""
    if "fieldRef" in ref:
        fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", "")}
        return fields[ref["fieldRef"]["fieldPath"]]
    kind = "ConfigMap" if "configMapKeyRef" in ref else "Secret"
    key = ref["configMapKeyRef"] if kind == "ConfigMap" else ref["secretKeyRef"]
    try:
        value = _data(find(objects, kind, key["name"])).get(key["key"])
    except LookupError:
        value = None
    if value is None and not key.get("optional"):
        raise LookupError(f"{kind} {key['name']} has no key {key['key']!r}")
    return value


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced by ``env[NAME]`` (kept as written if undefined), ``$$`` by ``$``."""
    return REFERENCE.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def expand_references(pod: Obj, objects: list[Obj]) -> Obj:
    """``pod`` with the ``$(VAR)`` references in its env values expanded as the kubelet does:
    by variables defined earlier (``envFrom``, then ``env`` in order, ConfigMap, Secret and
    downward-API values included); ``$$`` is a ``$``. ``objects``: the ConfigMaps and
    Secrets. Entries without references are left as they are, for podman to resolve."""
    pod = copy.deepcopy(pod)
    for c in containers(pod):
        env: dict[str, str] = {}
        for source in c.get("envFrom", []):
            ref = source.get("configMapRef") or source["secretRef"]
            kind = "ConfigMap" if "configMapRef" in source else "Secret"
            env |= _data(find(objects, kind, ref["name"]))
        for entry in c.get("env", []):
            if "value" in entry:
                value = expand(str(entry["value"]), env)
                if REFERENCE.search(str(entry["value"])):
                    entry["value"] = value
            elif (found := _source_value(entry["valueFrom"], pod["metadata"], objects)) is None:
                continue
            else:
                value = found
            env[entry["name"]] = value
    return pod


def with_data(objects: list[Obj], name: str, values: Mapping[str, str]) -> None:
    """Set keys of the ConfigMap ``name`` that exist already (an install's own values, as
    the README tells an operator to edit them)."""
    data = find(objects, "ConfigMap", name)["data"]
    missing = set(values) - set(data)
    if missing:
        raise KeyError(f"ConfigMap {name} has no {sorted(missing)}")
    data.update(values)


def for_podman(obj: Obj) -> Obj:
    """A Pod or Deployment as podman 4.3 must be given it to do what Kubernetes does:

    - container ports without a ``hostPort`` are dropped: Kubernetes publishes none of
      them, podman would publish each on every address of the host (and refuses them
      beside ``hostNetwork``); probes find named ports in the unchanged objects;
    - each ``emptyDir`` gets a name of its workload's own: podman makes it a named volume
      called as the pod's volume, which every pod with a volume so named would share."""
    obj = copy.deepcopy(obj)
    spec = pod_template_spec(obj)
    owner = obj["metadata"]["name"]
    for c in containers(obj):
        ports = [p for p in c.get("ports", []) if p.get("hostPort")]
        if ports:
            c["ports"] = ports
        else:
            c.pop("ports", None)
    renamed = {
        v["name"]: f"{owner}-{v['name']}" for v in spec.get("volumes", []) if "emptyDir" in v
    }
    for volume in spec.get("volumes", []):
        volume["name"] = renamed.get(volume["name"], volume["name"])
    for c in containers(obj):
        for mount in c.get("volumeMounts", []):
            mount["name"] = renamed.get(mount["name"], mount["name"])
    return obj
