"""``PARLEY_USER_MUTE`` in a running server: muted speech never interrupts the bot and
never becomes a turn, and the client is told when muting starts and stops.

A real server (subprocess) with every model at the OpenAI-compatible stub, and the aiortc
test client speaking espeak-ng audio into it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from testkit.openai_stub import OpenAIStub
from testkit.rtc_client import RTCTestClient, checked_client
from testkit.server_process import ServerProcess
from testkit.speech import make_speech

pytestmark = pytest.mark.e2e

LONG_ANSWER = "This answer takes a while to say out loud, so bear with me please. " * 9
STT = "/v1/audio/transcriptions"
CHAT = "/v1/chat/completions"


def is_type(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m.get("type") == name


def of_type(client: RTCTestClient, name: str) -> list[dict[str, Any]]:
    return [m for m in client.messages if m.get("type") == name]


@pytest.fixture(scope="module")
def early_speech(audio_dir: Path) -> Path:
    """About 3 s of speech that starts at once (no leading silence)."""
    text = "wait a moment I have one more thing to tell you about the booking for tomorrow"
    return make_speech(audio_dir, "early", text, before=0.05, after=1.0)


@pytest.fixture(scope="module")
def muted_server(start_server: Callable[..., ServerProcess], stub: OpenAIStub) -> ServerProcess:
    # No echo canceller: it would also quieten the user's voice while the bot plays (the
    # test client has no loudspeaker echo), and the VAD must hear it for the test to mean
    # anything.
    return start_server(
        **stub.server_settings(user_mute='["bot_speaking"]', echo_cancellation="false")
    )


@pytest.fixture
async def client(muted_server: ServerProcess, stub: OpenAIStub) -> AsyncIterator[RTCTestClient]:
    async with checked_client(muted_server.url, stub) as connected:
        yield connected


async def test_speech_while_the_bot_speaks_is_ignored(
    client: RTCTestClient, stub: OpenAIStub, speech_wav: Path
) -> None:
    stub.script_chat(LONG_ANSWER)
    client.send_rtvi("send-text", {"content": "Tell me a long story."})
    await client.wait_for(is_type("bot-started-speaking"), within=15)
    await client.wait_for(is_type("user-mute-started"), within=2)
    client.play(str(speech_wav))
    await client.wait_for(is_type("bot-stopped-speaking"), within=30)
    await client.wait_for(is_type("user-mute-stopped"), within=2)
    await asyncio.sleep(1.5)  # anything the speech would have caused has had time

    names = client.types()
    assert "bot-interrupted" not in names, "muted speech must not interrupt"
    assert "user-started-speaking" not in names and "user-transcription" not in names
    assert names.index("user-mute-started") < names.index("user-mute-stopped")
    assert not stub.requests(STT), "muted speech is not even transcribed"
    assert len(stub.requests(CHAT)) == 1, "no answer to muted speech"
    spoken = " ".join(m["data"]["text"] for m in of_type(client, "bot-output"))
    assert spoken.split() == LONG_ANSWER.split(), "the whole answer was spoken"


async def test_speech_begun_while_muted_is_no_turn_when_it_ends_unmuted(
    client: RTCTestClient, stub: OpenAIStub, early_speech: Path
) -> None:
    # About 1.2 s of the stub's voice: the speech below starts under it and outlasts it.
    stub.script_chat(
        "Here is a short answer that takes a little over one second to say out loud, then stops."
    )
    client.send_rtvi("send-text", {"content": "Say something short."})
    await client.wait_for(is_type("bot-started-speaking"), within=15)
    client.play(str(early_speech))  # starts under the bot, goes on after it stopped
    await client.wait_for(is_type("user-mute-stopped"), within=10)
    await client.played_out()  # the speech (and its trailing silence) has been sent
    await asyncio.sleep(1.5)  # anything the speech would have caused has had time

    names = client.types()
    assert "user-started-speaking" not in names and "user-transcription" not in names
    assert not stub.requests(STT)
    assert len(stub.requests(CHAT)) == 1


async def test_speech_after_the_bot_is_a_turn(
    client: RTCTestClient, stub: OpenAIStub, speech_wav: Path
) -> None:
    stub.config.transcript = "hello after the bot"
    stub.script_chat("Short.", "Heard you.")
    client.send_rtvi("send-text", {"content": "Say one word."})
    await client.wait_for(is_type("user-mute-stopped"), within=15)
    client.play(str(speech_wav))
    await client.wait_for(
        lambda m: (
            m.get("type") == "user-llm-text" and m["data"]["text"].startswith("hello after the bot")
        ),
        within=15,
    )
    await client.wait_for(
        lambda m: m.get("type") == "bot-output" and m["data"]["text"] == "Heard you.", within=15
    )
