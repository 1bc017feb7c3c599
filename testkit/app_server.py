"""``create_app()``'s app served by uvicorn on 127.0.0.1 inside the test's event loop.

For tests that must reach into a live session of a real server (``app.state.registry``)
to plant a fault, while real WebRTC clients talk to it over real sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from server.api.app import create_app
from server.session.registry import SessionRegistry
from server.session.session import Session
from server.settings import Settings
from testkit.exposition import parse
from testkit.openai_stub import OpenAIStub
from testkit.server_process import free_port


@dataclass
class AppServer:
    app: FastAPI
    url: str

    @property
    def registry(self) -> SessionRegistry:
        return self.app.state.registry

    def session(self, pc_id: str | None) -> Session:
        assert pc_id is not None
        session = self.registry.get(pc_id)
        assert session is not None, f"no session {pc_id}"
        return session

    async def metric(self, name: str) -> float:
        """The sum of a metric's samples (``name`` may carry labels), 0 when absent."""
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{self.url}/metrics")).text
        return parse(text).total(name)


@asynccontextmanager
async def serve_app(stub: OpenAIStub, **settings: Any) -> AsyncIterator[AppServer]:
    """The app with every model at ``stub``, no greeting, and ``settings`` on top."""
    port = free_port()
    config = Settings(
        host="127.0.0.1", port=port, greeting="", preload_models=False,
        llm="openai", stt="openai", tts="openai",
        openai_base_url=stub.base_url, openai_api_key=stub.api_key, **settings,
    )  # fmt: skip
    app = create_app(config)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    async with asyncio.timeout(15):
        while not server.started:
            await asyncio.sleep(0.02)
    try:
        yield AppServer(app, f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        await serving
