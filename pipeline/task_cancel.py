"""Ending background tasks: cancel them and wait until each has finished.

Every ``close()`` of a session's parts ends its tasks this way. Waiting matters: a task
cancelled but not awaited may still be running its ``finally`` (closing a stream,
writing a record) when what it uses is torn down. Each outcome (a result, an exception,
the cancellation) is retrieved and dropped: the tasks report their own failures where
they happen, and an exception never retrieved would be logged by asyncio as an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any] | None]) -> None:
    """Cancel ``tasks`` (None entries are skipped; finished ones are left as they are)
    and return once every one of them is done.

    If the caller itself is cancelled meanwhile, the tasks are cancelled again (a cleanup
    that awaits is cut short) and the caller's cancellation propagates once they are done."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
