"""Two example tools: a quick one (the time) and a long-running async one (research).

``research_topic`` shows the async-tool protocol: it survives interruptions, reports
progress with intermediate results, then returns its final result. It is a stand-in
for a slow backend and consults no real sources.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipeline.tools import ToolCall, ToolRegistry, ToolSpec

RESEARCH_STEPS = 3
RESEARCH_INTERVAL_SECS = 1.0


def _zone(name: str) -> tzinfo | None:
    if name.upper() == "UTC":
        return UTC  # needs no time-zone database
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


async def get_current_time(timezone: str = "UTC") -> dict[str, Any]:
    """Get the current date and time in a time zone.

    Args:
        timezone: An IANA time zone name such as "Europe/Paris" or "America/New_York".
    """
    zone = _zone(timezone)
    if zone is None:
        return {"error": f"unknown time zone {timezone!r}: use an IANA name like Europe/Paris"}
    now = datetime.now(zone)
    return {
        "timezone": timezone,
        "time": now.strftime("%H:%M"),
        "date": now.strftime("%A, %B %d, %Y"),
        "iso": now.isoformat(timespec="seconds"),
    }


def research_tool(
    steps: int = RESEARCH_STEPS, interval: float = RESEARCH_INTERVAL_SECS
) -> ToolSpec:
    """The ``research_topic`` tool, reporting ``steps`` progress updates ``interval``
    seconds apart (tests shorten both)."""

    async def research_topic(topic: str, *, call: ToolCall) -> dict[str, Any]:
        """Research a topic in the background. Progress arrives while you keep talking
        with the user; the findings arrive when the research is done.

        Args:
            topic: What to research, in a few words.
        """
        for step in range(1, steps + 1):
            await asyncio.sleep(interval)
            # Progress is recorded for the LLM to read, but does not make it speak:
            # a voice bot reciting "step 2 of 3" every second is noise.
            progress = {"topic": topic, "progress": f"step {step} of {steps}"}
            await call.result_callback(progress, is_final=False, run_llm=False)
        return {
            "topic": topic,
            "summary": f"Finished researching {topic} (example tool: no sources consulted).",
        }

    return ToolSpec.from_function(
        research_topic,
        cancel_on_interruption=False,
        timeout=steps * interval + 30,
    )


def default_registry(
    research_steps: int = RESEARCH_STEPS, research_interval: float = RESEARCH_INTERVAL_SECS
) -> ToolRegistry:
    """A registry with the example tools."""
    registry = ToolRegistry()
    registry.register(ToolSpec.from_function(get_current_time))
    registry.register(research_tool(research_steps, research_interval))
    return registry
