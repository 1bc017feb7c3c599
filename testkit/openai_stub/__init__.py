"""An OpenAI-compatible stub server on 127.0.0.1, for tests and benchmarks.

Real HTTP (FastAPI run by uvicorn in a background thread, on a free port), so the real
``openai`` client is exercised end to end. Endpoints: ``POST /v1/chat/completions``
(JSON or SSE), ``POST /v1/audio/transcriptions`` (multipart), ``POST /v1/audio/speech``
(streamed 24 kHz s16le PCM: a tone whose length scales with the text) and
``GET /v1/models``.

    with OpenAIStub() as stub:                       # or the ``openai_stub`` fixture
        stub.config.first_token_delay = 0.05         # delays: see StubConfig
        stub.script_chat("Hi there.", ChatReply(tool_calls=(ToolCall("f", {"a": 1}),)))
        stub.script_chat(Fault.http(500), Fault.hang(), Fault.cut(after=2))
        stub.fail_times("stt", 2, Fault.http(503))  # then the default transcript
        ... OpenAILLM("m", base_url=stub.base_url, api_key=stub.api_key) ...
        stub.requests("/v1/chat/completions")[-1].body["tools"]

In tests, ``from testkit.openai_stub import openai_stub_fixture  # noqa: F401`` provides the
``openai_stub`` fixture (one server per session, reset for each test).

Each endpoint takes its scripted items in order and falls back to the default reply
when its queue is empty. Every request is recorded (headers, parsed body, whether the
client went away before the response ended). Hangs and stalls end when the client
disconnects, after ``max_hang`` seconds, or when the stub stops.

Modules: ``script`` (replies, config, records), ``faults``, ``core`` (scripts, records,
sleeps), ``chat``, ``audio`` (the endpoints), ``server`` (:class:`OpenAIStub`) and
``fixture``.
"""

from testkit.openai_stub.audio import wav_info
from testkit.openai_stub.faults import Fault, FaultKind
from testkit.openai_stub.fixture import openai_stub_fixture
from testkit.openai_stub.script import (
    TTS_RATE,
    ChatReply,
    Endpoint,
    RecordedRequest,
    StubConfig,
    ToolCall,
)
from testkit.openai_stub.server import OpenAIStub

__all__ = [
    "TTS_RATE",
    "ChatReply",
    "Endpoint",
    "Fault",
    "FaultKind",
    "OpenAIStub",
    "RecordedRequest",
    "StubConfig",
    "ToolCall",
    "openai_stub_fixture",
    "wav_info",
]
