"""Static checks of deploy/: the HAProxy configuration passes ``haproxy -c`` (plain and with
TLS), its image passes hadolint, and the compose file of the scaled-out setup is valid and
consistent (each replica its own id, port and volume; HAProxy pointed at those ports; a stop
grace period longer than the drain). Routing itself is checked live by ``make scale-test``
(deploy/scale_test.py). HAProxy comes from Debian: ``make test`` installs it."""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from testkit.dev_tools import run_dev_tool
from testkit.haproxy import CONFIG, check_config, haproxy_binary

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.scale.yaml"
CI_ENV = {"LB_BIND": "127.0.0.1:18080", "R1_ADDR": "127.0.0.1:18081", "R2_ADDR": "127.0.0.1:18082"}


def haproxy_check(env: dict[str, str]) -> str:
    try:
        haproxy_binary()
    except RuntimeError as exc:
        pytest.fail(f"{exc}; `make test` installs it (test-tools)")
    proc = check_config(env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


def self_signed_pem(folder: Path) -> Path:
    """A PEM with a self-signed certificate for localhost and its key, as HAProxy takes."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = folder / "parley.pem"
    pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pem


@pytest.mark.parametrize("env", [CI_ENV, {}], ids=["addresses from the environment", "defaults"])
def test_config_is_valid_without_warnings(env: dict[str, str]) -> None:
    output = haproxy_check(env)
    assert "Configuration file is valid" in output
    assert "[WARNING]" not in output, output


def test_config_with_tls_is_valid(tmp_path: Path) -> None:
    output = haproxy_check({**CI_ENV, "LB_TLS_CERT": str(self_signed_pem(tmp_path))})
    assert "[WARNING]" not in output, output


def test_config_refuses_a_missing_certificate(tmp_path: Path) -> None:
    """LB_TLS_CERT is really read: a certificate that is not there fails the check."""
    proc = check_config({**CI_ENV, "LB_TLS_CERT": str(tmp_path / "none.pem")})
    assert proc.returncode != 0
    assert "none.pem" in proc.stdout + proc.stderr


def test_every_replica_has_a_backend_and_a_server_for_new_sessions() -> None:
    """Routing by id needs both: the replica's own backend and its place among new sessions."""
    sections = re.split(r"^(?=\S)", CONFIG.read_text(), flags=re.M)
    owned = {m[1] for s in sections if (m := re.match(r"backend replica_(\S+)\n", s))}
    new_sessions = next(s for s in sections if s.startswith("backend new_sessions\n"))
    balanced = set(re.findall(r"^\s+server (\S+) ", new_sessions, re.M))
    assert owned == balanced == {"r1", "r2"}


def test_haproxy_image() -> None:
    dockerfile = DEPLOY / "haproxy" / "Dockerfile"
    run_dev_tool("hadolint", str(dockerfile))
    text = dockerfile.read_text()
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.search(r"^COPY haproxy\.cfg ", text, re.M)
    assert re.search(r"^USER 10003:10003$", text, re.M), "not an unprivileged numeric user"
    assert re.search(r"^STOPSIGNAL SIGUSR1$", text, re.M), "stopping would cut requests"
    assert re.search(r"^HEALTHCHECK ", text, re.M)


def test_compose_schema() -> None:
    run_dev_tool("check-jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE))


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's environment list as a dict (None: passed through from the host)."""
    items = (entry.split("=", 1) for entry in service.get("environment", []))
    return {item[0]: item[1] if len(item) == 2 else None for item in items}


def resolved(services: dict[str, Any], name: str) -> dict[str, Any]:
    """A service with its ``extends`` applied as compose does: environment merged by name,
    volumes by mount point, everything else overridden."""
    service = services[name]
    if "extends" not in service:
        return service
    base = resolved(services, service["extends"]["service"])
    merged = {**base, **{k: v for k, v in service.items() if k != "extends"}}
    env = environment(base) | environment(service)
    merged["environment"] = [k if v is None else f"{k}={v}" for k, v in env.items()]
    mounts = {v.split(":")[1]: v for v in base.get("volumes", []) + service.get("volumes", [])}
    merged["volumes"] = list(mounts.values())
    return merged


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)s", duration)
    assert match, f"unexpected duration {duration!r}"
    return float(match[1])


def test_compose_replicas_are_distinct_and_behind_haproxy() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    lb = environment(services["haproxy"])
    for rid in ("r1", "r2"):
        replica = resolved(services, f"parley-{rid}")
        env = environment(replica)
        assert env["PARLEY_REPLICA_ID"] == rid
        assert lb[f"{rid.upper()}_ADDR"] == f"127.0.0.1:{env['PARLEY_PORT']}"
        assert env["PARLEY_HOST"] == "127.0.0.1", "a replica's HTTP is for HAProxy only"
        assert [v.split(":")[0] for v in replica["volumes"]] == [f"parley-{rid}-data"]
        assert f"parley-{rid}-data" in compose["volumes"]
        # The runtime's SIGKILL comes after stop_grace_period: the drain must end before.
        grace = float(env["PARLEY_SHUTDOWN_GRACE_SECONDS"].rsplit("-", 1)[1].rstrip("}"))
        assert seconds(replica["stop_grace_period"]) >= grace + 3
    modes = {name: resolved(services, name).get("network_mode") for name in services}
    assert set(modes.values()) == {"host"}, f"media needs the host's addresses: {modes}"
    assert services["turn"]["build"]["dockerfile"] == "Dockerfile.turn"
