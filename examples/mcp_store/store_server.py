"""Spoke & Chain's store system as an MCP server: opening hours and stock, by store.

Written with the official MCP SDK and served over stdio, so any MCP client can use it;
the agent beside it (agent.py) has Parley start it. On its own::

    .venv/bin/python examples/mcp_store/store_server.py    # speaks JSON-RPC on stdin/stdout
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

Store = Literal["downtown", "riverside"]

STORES: dict[str, dict[str, Any]] = {
    "downtown": {
        "name": "Spoke & Chain Downtown",
        "address": "14 Market Street",
        "phone": "555-0142",
        "hours": {
            "monday": "8:00 to 19:00",
            "tuesday": "8:00 to 19:00",
            "wednesday": "8:00 to 19:00",
            "thursday": "8:00 to 21:00",
            "friday": "8:00 to 19:00",
            "saturday": "9:00 to 17:00",
            "sunday": "closed",
        },
    },
    "riverside": {
        "name": "Spoke & Chain Riverside",
        "address": "3 Towpath Lane",
        "phone": "555-0178",
        "hours": {
            "monday": "closed",
            "tuesday": "10:00 to 18:00",
            "wednesday": "10:00 to 18:00",
            "thursday": "10:00 to 18:00",
            "friday": "10:00 to 18:00",
            "saturday": "9:00 to 18:00",
            "sunday": "10:00 to 16:00",
        },
    },
}

# Product → name, price (USD) and units on the shelf per store.
STOCK: dict[str, dict[str, Any]] = {
    "BR-CLX6": {
        "name": "Brompton C Line Explore folding bike",
        "price": 1750.00,
        "stock": {"downtown": 2, "riverside": 0},
    },
    "CB-KH750": {
        "name": "Cube Kathmandu Hybrid EXC 750 e-bike",
        "price": 3299.00,
        "stock": {"downtown": 1, "riverside": 3},
    },
    "SH-CN6100": {
        "name": "Shimano Deore M6100 12-speed chain",
        "price": 34.99,
        "stock": {"downtown": 18, "riverside": 6},
    },
    "SW-TUBE700": {
        "name": "Schwalbe inner tube 700x28-45c, Presta valve",
        "price": 8.50,
        "stock": {"downtown": 40, "riverside": 12},
    },
    "GI-HLM-M": {
        "name": "Giro Register MIPS helmet, medium",
        "price": 69.95,
        "stock": {"downtown": 0, "riverside": 0},
    },
}

server = MCPServer("spoke-and-chain-stores", log_level="WARNING")


@server.tool()
def store_hours(
    store: Annotated[Store, Field(description="Which store: downtown or riverside.")],
) -> dict[str, Any]:
    """Opening hours of a store for each day of the week, with its address and phone."""
    return {"store": store, **STORES[store]}


@server.tool()
def check_stock(
    product: Annotated[str, Field(description="What the caller asks for, e.g. 'inner tube'.")],
) -> dict[str, Any]:
    """Find products by name, with their price and how many each store has on the shelf."""
    words = product.lower().split()
    found = [
        {"sku": sku, **item}
        for sku, item in STOCK.items()
        if all(word in item["name"].lower() for word in words)
    ]
    if not found:
        # An isError result: the LLM is told, and can ask the caller to put it differently.
        raise ToolError(f"nothing in the catalogue matches {product!r}")
    return {"query": product, "products": found}


if __name__ == "__main__":
    server.run("stdio")
