"""The stub server: uvicorn in a background thread on 127.0.0.1, plus the scripting API."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from testkit.openai_stub.audio import AudioEndpoints
from testkit.openai_stub.chat import ChatEndpoint
from testkit.openai_stub.faults import Fault, not_deliberate
from testkit.openai_stub.realtime import RealtimeEndpoint
from testkit.openai_stub.script import ChatReply, Endpoint, RecordedRequest, StubConfig


class OpenAIStub(ChatEndpoint, AudioEndpoints, RealtimeEndpoint):
    """The stub server; a context manager (``start``/``stop``) with a script per endpoint.

    ``stop()`` then ``start()`` brings it back on the same port: in between, connections
    are refused, as from a provider that is down.
    """

    def __init__(self, config: StubConfig | None = None) -> None:
        super().__init__(config)
        self._realtime_reset()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._port = 0
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def api_key(self) -> str:
        return self.config.api_key or "any-key"

    def server_settings(self, **more: str) -> dict[str, str]:
        """A Parley server's settings with STT, LLM and TTS all at this stub."""
        return {
            "stt": "openai", "llm": "openai", "tts": "openai",
            "openai_base_url": self.base_url, "openai_api_key": self.api_key, **more,
        }  # fmt: skip

    def realtime_settings(self, **more: str) -> dict[str, str]:
        """A Parley server's settings with the LLM a realtime model at this stub (its STT
        and TTS here too)."""
        base = self.url.replace("http://", "ws://") + "/v1"
        return self.server_settings(llm="realtime", realtime_base_url=base,
                                    realtime_api_key=self.api_key, **more)  # fmt: skip

    def start(self, timeout: float = 10.0) -> OpenAIStub:
        server_log = logging.getLogger("uvicorn.error")
        if not_deliberate not in server_log.filters:
            server_log.addFilter(not_deliberate)
        sock = socket.socket()
        # The same port on a restart (connections of the last run may be in TIME_WAIT).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self._port))
        self._port = sock.getsockname()[1]
        self._socket = sock
        self._stopping.clear()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self._app(),
            log_config=None,  # leave the host process's logging alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="openai-stub"
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError("the OpenAI stub did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting and records ---------------------------------------------------------------

    def reset(self) -> None:
        """Default config, empty scripts, no records."""
        with self._lock:
            self.config = StubConfig()
            for queue in self._queues.values():
                queue.clear()
            self._requests.clear()
            self._realtime_reset()

    def script_chat(self, *items: ChatReply | Fault | str) -> None:
        """Queue chat answers: a string is a text reply."""
        self._push("chat", [ChatReply(i) if isinstance(i, str) else i for i in items])

    def script_stt(self, *items: str | Fault) -> None:
        """Queue transcripts or faults."""
        self._push("stt", list(items))

    def script_tts(self, *items: Fault | None) -> None:
        """Queue TTS faults; ``None`` is a normal answer."""
        self._push("tts", list(items))

    def fail_times(self, endpoint: Endpoint, n: int, fault: Fault) -> None:
        """The next ``n`` requests to ``endpoint`` fail with ``fault``, then it recovers."""
        self._push(endpoint, [fault] * n)

    def requests(self, path: str | None = None) -> list[RecordedRequest]:
        """Requests received so far (to ``path``, if given), oldest first."""
        with self._lock:
            return [r for r in self._requests if path is None or r.path == path]

    async def wait_for(self, predicate: Callable[[], bool], within: float = 2.0) -> bool:
        """Poll ``predicate`` (for state the server thread sets) for up to ``within`` s."""
        deadline = time.monotonic() + within
        while not predicate():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    # -- the app -----------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI()
        app.post("/v1/chat/completions")(self._chat)
        app.post("/v1/audio/transcriptions")(self._transcriptions)
        app.post("/v1/audio/speech")(self._speech)
        app.get("/v1/models")(self._models)
        app.websocket("/v1/realtime")(self._realtime)
        return app

    async def _models(self, request: Request) -> Response:
        if (early := (await self._begin(request, "models"))[2]) is not None:
            return early
        names = ("stub-llm", "stub-stt", "stub-tts")
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "stub"} for n in names]
        return JSONResponse({"object": "list", "data": data})
