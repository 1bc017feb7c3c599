"""The built-in tools: the current time, and a demo of an async tool.

``get_current_time`` is real and offered by default (``PARLEY_TOOLS_ENABLED``).

``research_topic`` is only an example of an async tool, off by default
(``PARLEY_DEMO_TOOLS``): it survives interruptions, reports progress with intermediate
results, then returns its final result, which is how a slow backend (a search, a
booking) would plug in. It consults nothing, so offering it to real users would have the
LLM announce "research" that never happened; its description tells the LLM so too.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipeline.tools.registry import ToolCall, ToolRegistry, ToolSpec

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
    """The demo async tool ``research_topic``, reporting ``steps`` progress updates
    ``interval`` seconds apart (tests shorten both)."""

    async def research_topic(topic: str, *, call: ToolCall) -> dict[str, Any]:
        """Demo of a background task (it consults no sources; say so if asked): research
        a topic in the background. Progress arrives while you keep talking with the user;
        the result arrives when it is done.

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
    demo_tools: bool = False,
    research_steps: int = RESEARCH_STEPS,
    research_interval: float = RESEARCH_INTERVAL_SECS,
) -> ToolRegistry:
    """A registry with the built-in tools; ``demo_tools`` adds the demo async tool."""
    registry = ToolRegistry()
    registry.register(ToolSpec.from_function(get_current_time))
    if demo_tools:
        registry.register(research_tool(research_steps, research_interval))
    return registry
