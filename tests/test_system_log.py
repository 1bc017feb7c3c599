"""system-log: a session's own log lines reach its client, nobody else's, at the level asked."""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger

from server.rtvi import server_messages
from server.rtvi.system_log import SystemLogForwarder, session_context


def warn(text: str) -> None:
    logger.warning(text)


async def test_only_the_sessions_lines_at_the_level_are_forwarded() -> None:
    sent: list[dict[str, Any]] = []
    forwarder = SystemLogForwarder("pc-a", sent.append, "INFO")
    try:
        with session_context("pc-a"):
            logger.info("tool {} ran", "get_time")
            logger.debug("too chatty")
            # A task started here is the session's too.
            await asyncio.create_task(asyncio.to_thread(warn, "from a thread"))
        with session_context("pc-b"):
            logger.warning("another session")
        logger.error("no session")
        await asyncio.sleep(0.05)
    finally:
        forwarder.close()
    texts = [server_messages.validate(m).text for m in sent]
    assert texts == [
        "INFO tests.test_system_log: tool get_time ran",
        "WARNING tests.test_system_log: from a thread",
    ]
    with session_context("pc-a"):
        logger.warning("after close")
    await asyncio.sleep(0.02)
    assert len(sent) == 2


async def test_a_line_logged_while_sending_does_not_loop() -> None:
    sent: list[dict[str, Any]] = []

    def send(msg: dict[str, Any]) -> None:
        sent.append(msg)
        logger.warning("send failed")  # as a closing data channel would

    forwarder = SystemLogForwarder("pc-a", send, "INFO")
    try:
        with session_context("pc-a"):
            logger.info("once")
        await asyncio.sleep(0.05)
    finally:
        forwarder.close()
    assert len(sent) == 1
