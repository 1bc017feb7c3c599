"""The ``openai_stub`` pytest fixture: one stub per test session, reset for each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.openai_stub.server import OpenAIStub

_SHARED = pytest.StashKey[OpenAIStub]()


@pytest.fixture(name="openai_stub")
def openai_stub_fixture(request: pytest.FixtureRequest) -> Iterator[OpenAIStub]:
    """The stub with a fresh script and config. One server serves the whole session
    (started on first use, stopped at session end), so tests only import this name."""
    config = request.config
    stub = config.stash.get(_SHARED, None)
    if stub is None:
        stub = OpenAIStub().start()
        config.stash[_SHARED] = stub
        config.add_cleanup(stub.stop)
    stub.reset()
    yield stub
    stub.reset()
