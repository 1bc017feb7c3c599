"""An agent whose tools come from an MCP server: the store system in store_server.py.

    PARLEY_AGENT=examples/mcp_store/agent.py make run

Parley starts the server (one process, shared by every call), lists its tools and offers
them to the LLM with the server's own names, descriptions and schemas. If the server
dies, its tools answer with an error until Parley has restarted it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.agent import Agent

agent = Agent(
    name="store-info",
    instructions=(
        "You answer phone calls for Spoke & Chain Cycles, a bike shop with two stores, "
        "downtown and riverside. Use your tools for opening hours and for what is in stock; "
        "never guess either. Keep every answer to one or two short spoken sentences."
    ),
    greeting="Hi, Spoke & Chain! Ask me about our opening hours or what's in stock.",
    mcp_servers=[
        {
            "name": "stores",
            # The same Python as Parley's, so the server finds the mcp package.
            "command": [sys.executable, str(Path(__file__).with_name("store_server.py"))],
            "timeout": 5,
        }
    ],
)
