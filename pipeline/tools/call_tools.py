"""The tools one call offers: the tools of the agent in charge (which a handoff swaps), then
the shared ones (built-in, MCP, HTTP, client-side, the app's), looked up live so that a tool
source that connects later counts from the next LLM run on.

An agent's tool hides a shared tool of the same name: the agent is the more specific of the
two, and the LLM must never be offered two tools under one name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline.tools.agent import Agent
from pipeline.tools.registry import ToolRegistry, ToolSpec


class CallTools(ToolRegistry):
    """The agent's tools over the shared registry; ``agent`` may change during the call."""

    def __init__(self, shared: ToolRegistry | None, agent: Agent | None) -> None:
        super().__init__()
        self.shared = shared
        self.agent = agent

    def get(self, name: str) -> ToolSpec | None:
        if self.agent is not None and (spec := self.agent.tools.get(name)) is not None:
            return spec
        return self.shared.get(name) if self.shared is not None else None

    def register(self, spec: ToolSpec) -> ToolSpec:
        raise TypeError("register tools on the agent or on the shared registry")

    def openai_tools(self) -> list[dict[str, Any]]:
        return [spec.openai_tool() for spec in self]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[ToolSpec]:
        own = self.agent.tools if self.agent is not None else ToolRegistry()
        yield from own
        for spec in self.shared or ():
            if spec.name not in own:
                yield spec

    def __len__(self) -> int:
        return sum(1 for _ in self)
