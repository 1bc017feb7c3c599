"""What ``make kube-test`` (deploy/kube_play_test.py) gives ``podman kube play``: the
workloads of deploy/kubernetes/ as committed, made into what Kubernetes would run
(testkit/kube_play.py), with this install's own values where the README's install steps
put them, written to a folder.

- kustomization.yaml rendered, its images set to the ones ``make container-test`` built;
- the StatefulSet ``parley`` as its controller makes it: pods ``parley-0`` ... (its
  ``spec.replicas``) and their claims ``data-parley-N`` (podman plays no StatefulSet);
- coturn: the Deployment ``parley-turn`` as written, on the host network;
- the ConfigMaps, with TURN_HOST (this host's address) and OPENAI_BASE_URL (the stub)
  set, passed with ``--configmap``;
- the Secrets of secrets.example.yaml, with generated values, as podman secrets.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testkit.kube_play import (
    containers,
    expand_references,
    find,
    for_podman,
    pod_template_spec,
    render,
    statefulset_pods,
    with_data,
)
from testkit.kubernetes_manifests import SECRETS_EXAMPLE
from testkit.podman import IMAGE, TURN_IMAGE

Obj = dict[str, Any]
STATEFULSET = "parley"
TURN_DEPLOYMENT = "parley-turn"
# The ConfigMaps the played workloads read (parley-haproxy is HAProxy's, not played).
CONFIGMAPS = ("parley-models", "parley-storage", "parley-turn")


@dataclass
class Plan:
    """The files to play and the names of everything playing them makes."""

    folder: Path
    objects: list[Obj]  # the rendered manifests (with this install's ConfigMap values)
    parley_pods: list[Obj]  # as Kubernetes would run them ($(VAR) expanded), ports intact
    turn: Obj  # the Deployment parley-turn, as rendered
    secrets: dict[str, dict[str, str]]  # Secret name -> its keys' values
    workloads_file: Path = field(init=False)
    configmap_files: list[Path] = field(default_factory=list)

    @property
    def pod_names(self) -> list[str]:
        """Every pod podman makes: the StatefulSet's and the Deployment's (podman names a
        Deployment's pods <name>-pod-<i>)."""
        turns = [f"{TURN_DEPLOYMENT}-pod-{i}" for i in range(self.turn["spec"].get("replicas", 1))]
        return [p["metadata"]["name"] for p in self.parley_pods] + turns

    @property
    def volume_names(self) -> list[str]:
        """The claims' volumes and the emptyDirs' (named by for_podman)."""
        names = []
        for workload in [*self.parley_pods, self.turn]:
            for volume in pod_template_spec(workload).get("volumes", []):
                owner = workload["metadata"]["name"]
                if "persistentVolumeClaim" in volume:
                    names.append(volume["persistentVolumeClaim"]["claimName"])
                elif "emptyDir" in volume:
                    names.append(f"{owner}-{volume['name']}")
        return names

    @property
    def api_key(self) -> str:
        return self.secrets["parley-api-keys"]["PARLEY_API_KEYS"]

    @property
    def turn_password(self) -> str:
        return self.secrets["parley-turn-credentials"]["TURN_PASSWORD"]

    def container(self, pod: Obj) -> Obj:
        (parley,) = [c for c in containers(pod) if c["name"] == "parley"]
        return parley

    def turn_container(self) -> Obj:
        (turn,) = [c for c in containers(self.turn) if c["name"] == "turn"]
        return turn


def secret_values(model_key: str) -> dict[str, dict[str, str]]:
    """Every Secret of secrets.example.yaml the workloads read, with a value for each of its
    keys (as the README's step 3 makes them); parley-database (PostgreSQL only) is left out:
    the StatefulSet reads it as optional, and the ConfigMap says sqlite."""
    values = {
        "parley-turn-credentials": {"TURN_PASSWORD": secrets.token_hex(16)},
        "parley-api-keys": {"PARLEY_API_KEYS": secrets.token_hex(24)},
        "parley-model-keys": {"OPENAI_API_KEY": model_key},
    }
    for example in yaml.safe_load_all(SECRETS_EXAMPLE.read_text()):
        name = example["metadata"]["name"]
        if name in values and set(example["stringData"]) != set(values[name]):
            raise KeyError(f"{name}: the example has {sorted(example['stringData'])}")
    return values


def make_plan(folder: Path, turn_host: str, models_url: str, model_key: str) -> Plan:
    """Render, make the pods, and write the files into ``folder``."""
    played = render({"parley": IMAGE, "parley-turn": TURN_IMAGE})
    with_data(played, "parley-turn", {"TURN_HOST": turn_host})
    with_data(played, "parley-models", {"OPENAI_BASE_URL": models_url})
    values = secret_values(model_key)
    secret_objects: list[Obj] = [
        {"kind": "Secret", "metadata": {"name": name}, "stringData": data}
        for name, data in values.items()
    ]
    configmaps = [find(played, "ConfigMap", name) for name in CONFIGMAPS]
    made = statefulset_pods(find(played, "StatefulSet", STATEFULSET))
    pods = [expand_references(o, configmaps + secret_objects) for o in made if o["kind"] == "Pod"]
    claims = [o for o in made if o["kind"] == "PersistentVolumeClaim"]
    turn = find(played, "Deployment", TURN_DEPLOYMENT)
    plan = Plan(folder, played, pods, turn, values)
    plan.workloads_file = folder / "workloads.yaml"
    workloads = [*claims, *(for_podman(p) for p in pods), for_podman(turn)]
    plan.workloads_file.write_text(yaml.safe_dump_all(workloads, sort_keys=False))
    for configmap in configmaps:
        path = folder / f"configmap-{configmap['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(configmap, sort_keys=False))
        plan.configmap_files.append(path)
    return plan


# Why the other objects kustomization.yaml applies are not played.
WHY_NOT = {
    "Namespace": "podman has no namespaces",
    "Service": "podman has no Services: the client calls the pod's own address, as HAProxy",
    "PodDisruptionBudget": "no eviction API",
    "HorizontalPodAutoscaler": "no metrics API or autoscaler",
    "NetworkPolicy": "no CNI that enforces policies",
}
HAPROXY = "HAProxy finds the pods by cluster DNS (its routing: test_deploy_kubernetes_haproxy.py)"


def not_played(plan: Plan) -> dict[str, list[str]]:
    """The rendered objects not played, by the reason why."""
    played = {("StatefulSet", STATEFULSET), ("Deployment", TURN_DEPLOYMENT)}
    played |= {("ConfigMap", name) for name in CONFIGMAPS}
    reasons: dict[str, list[str]] = {}
    for obj in plan.objects:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if (kind, name) in played:
            continue
        why = HAPROXY if name == "parley-haproxy" and kind != "Service" else WHY_NOT[kind]
        reasons.setdefault(why, []).append(f"{kind} {name}")
    return reasons
