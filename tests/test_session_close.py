"""Closing a session frees its slot whatever a close step raises.

A real server in process with one slot (``max_sessions=1``) and real WebRTC clients: a
close step is made to raise, and the next client must still get the slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from testkit.app_server import AppServer, serve_app
from testkit.openai_stub import OpenAIStub
from testkit.openai_stub import openai_stub_fixture as openai_stub_fixture
from testkit.rtc_client import RTCTestClient

pytestmark = pytest.mark.e2e


def broken_step(*args: object) -> None:
    raise RuntimeError("a close step is broken")


async def broken_async_step() -> None:
    raise RuntimeError("a close step is broken")


@pytest.fixture
async def one_slot(openai_stub: OpenAIStub, tmp_path: object) -> AsyncIterator[AppServer]:
    async with serve_app(openai_stub, max_sessions=1, data_dir=str(tmp_path)) as app:
        yield app


async def wait_empty(served: AppServer, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while len(served.registry):
        assert time.monotonic() < deadline, "the slot was never freed"
        await asyncio.sleep(0.05)


async def connect(served: AppServer) -> RTCTestClient:
    client = RTCTestClient(served.url)
    await client.connect()
    return client


async def test_a_failing_close_step_still_frees_the_slot(one_slot: AppServer) -> None:
    first = await connect(one_slot)
    try:
        session = one_slot.session(first.pc_id)
        session.voice.close = broken_async_step  # the first step that can fail
        assert session.record is not None
        session.record.close = broken_step  # and one in the last part
        first.send_rtvi("disconnect-bot")  # closed by a task nobody awaits
        await wait_empty(one_slot)
        assert session.closed.is_set()
        assert session.transport.connection_state == "closed", "the steps after the fault ran"
    finally:
        await first.close()

    second = await connect(one_slot)  # the limit is 1: this needs the freed slot
    try:
        session = one_slot.session(second.pc_id)
        session.voice.transcriber.close = broken_async_step  # inside the pipeline's close
        async with httpx.AsyncClient() as http:
            deleted = await http.delete(f"{one_slot.url}/api/sessions/{second.pc_id}")
            assert deleted.status_code == 200, deleted.text
            listed = (await http.get(f"{one_slot.url}/api/sessions")).json()
        assert listed["sessions"] == []
        assert await one_slot.metric('parley_errors_total{kind="handler"}') >= 3
    finally:
        await second.close()
    third = await connect(one_slot)
    await third.close()
