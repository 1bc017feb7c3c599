"""What an agent file imports: ``from pipeline.agent import Agent, CallContext``.

The agent and the call's context are defined with the tools they offer
(:mod:`pipeline.tools.agent`, :mod:`pipeline.tools.call_context`); this module is the one
stable name for them, so an agent file does not follow the package's layout.
"""

from __future__ import annotations

from pipeline.tools.agent import Agent
from pipeline.tools.call_context import CallContext

__all__ = ["Agent", "CallContext"]
