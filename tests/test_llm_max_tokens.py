"""PARLEY_LLM_MAX_TOKENS: the longest answer, sent to the OpenAI-compatible LLM as
``max_tokens`` (the stub on 127.0.0.1 records what it received)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pipeline.services.openai_llm import OpenAILLM
from server.session.model_services import build_services
from server.settings import Settings
from testkit.openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401

CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Hello?"}]


async def sent_max_tokens(openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> object:
    """What the server's LLM, built from the environment, sends as max_tokens."""
    monkeypatch.setenv("PARLEY_OPENAI_BASE_URL", openai_stub.base_url)
    monkeypatch.setenv("PARLEY_OPENAI_API_KEY", openai_stub.api_key)
    monkeypatch.setenv("PARLEY_TURN_END", "fixed")  # no end-of-turn model to load
    services = build_services(Settings())
    try:
        assert isinstance(services.llm, OpenAILLM)
        [chunk async for chunk in services.llm.stream(USER)]
    finally:
        await services.aclose()
    return openai_stub.requests(CHAT)[-1].body.get("max_tokens", "not sent")


@pytest.mark.parametrize(
    ("value", "sent"), [(None, 1024), ("300", 300), ("0", "not sent"), ("", "not sent")]
)
async def test_the_stub_receives_the_setting(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch, value: str | None, sent: object
) -> None:
    if value is None:
        monkeypatch.delenv("PARLEY_LLM_MAX_TOKENS", raising=False)
    else:
        monkeypatch.setenv("PARLEY_LLM_MAX_TOKENS", value)
    assert await sent_max_tokens(openai_stub, monkeypatch) == sent


async def test_the_service_sends_none_unless_given(openai_stub: OpenAIStub) -> None:
    for limit, sent in ((None, "not sent"), (64, 64)):
        llm = OpenAILLM("m", base_url=openai_stub.base_url, api_key="sk-stub", max_tokens=limit)
        [chunk async for chunk in llm.stream(USER)]
        await llm.aclose()
        assert openai_stub.requests(CHAT)[-1].body.get("max_tokens", "not sent") == sent


def test_the_embedded_llm_keeps_its_own_default_and_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PARLEY_LLM_MAX_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PARLEY_LLM", "local")
    assert Settings().llm_token_limit() == 80
    monkeypatch.setenv("PARLEY_LLM_MAX_TOKENS", "24")
    assert Settings().llm_token_limit() == 24
    for bad in ("1024", "0", "-1"):
        monkeypatch.setenv("PARLEY_LLM_MAX_TOKENS", bad)
        with pytest.raises(ValidationError, match="llm_max_tokens"):
            Settings()
    monkeypatch.setenv("PARLEY_LLM", "openai")
    monkeypatch.setenv("PARLEY_LLM_MAX_TOKENS", "-1")
    with pytest.raises(ValidationError, match="llm_max_tokens"):
        Settings()
