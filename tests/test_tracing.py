"""When tracing is on: only when the ``OTEL_*`` variables ask for OTLP, and then with the
SDK's provider named after the service; without them the SDK is not even imported."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from server.ops.tracing import Tracing, start_tracing, traces_wanted

ROOT = Path(__file__).resolve().parent.parent
ENDPOINT = "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_traces_are_wanted_only_with_an_otlp_endpoint(
    environ: dict[str, str], wanted: bool
) -> None:
    assert traces_wanted(environ) is wanted


def test_without_an_endpoint_there_is_no_tracing() -> None:
    assert start_tracing(False, {}) is None
    assert start_tracing(True, {"OTEL_SDK_DISABLED": "true"}) is None


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "parley"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SERVICE_NAME": "desk-eu"}, "desk-eu"),
    ],
)
def test_the_provider_is_named_after_the_service(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], name: str
) -> None:
    # The SDK reads the resource and the exporter's variables itself.
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    tracing = start_tracing(True, environ)
    assert isinstance(tracing, Tracing)
    try:
        resource = tracing.provider.resource.attributes
        assert resource["service.name"] == name
        assert resource["service.version"]
        assert tracing.trace_text is True
    finally:
        tracing.shutdown()


def test_a_collector_that_never_answers_does_not_hold_the_shutdown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), answers nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        tracing = start_tracing(False, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
        assert tracing is not None
        tracing.tracer.start_span("call").end()
        started = time.monotonic()
        tracing.shutdown(within=0.5)
        # Not a speed target: the export that never ends would hold it for 10 s (its own
        # timeout); a bound this loose only tells "it let go" from "it waited that out".
        assert time.monotonic() - started < 8.0


# A server's app through its whole lifespan, in a fresh interpreter: what it imported.
PROBE = """
import json, sys
from fastapi.testclient import TestClient
from server.api.app import create_app
from server.settings import Settings
app = create_app(Settings(preload_models=False))
with TestClient(app):
    listeners = [type(l).__name__ for l in app.state.registry.listeners]
    print(json.dumps({"tracing": app.state.tracing is not None, "listeners": listeners,
                      "sdk": "opentelemetry.sdk" in sys.modules}))
"""


def probe(env: dict[str, str], tmp_path: Path) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    clean |= {"PARLEY_DATA_DIR": str(tmp_path), **env}
    run = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def test_a_server_without_otel_variables_builds_and_imports_nothing_of_tracing(
    tmp_path: Path,
) -> None:
    assert probe({}, tmp_path) == {
        "tracing": False,
        "listeners": ["ServerMetrics"],
        "sdk": False,
    }


def test_a_server_with_an_endpoint_watches_its_calls(tmp_path: Path) -> None:
    found = probe({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, tmp_path)
    assert found == {"tracing": True, "listeners": ["ServerMetrics", "Tracing"], "sdk": True}
