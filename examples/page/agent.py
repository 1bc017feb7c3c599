"""An agent that works the web page the caller is looking at: the page runs two tools
itself (client-side tools: show a product, switch the colours), and a server tool puts a
toast on it (a UI command).

    PARLEY_AGENT=examples/page/agent.py make run

The page is this folder's static/ (served at / instead of the bundled client): a short
WebRTC + RTVI client that answers the client-side tool calls and shows the toasts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pipeline.agent import Agent, CallContext
from pipeline.ui.protocol import Toast

ProductId = Literal["brompton", "kathmandu", "helmet"]
Store = Literal["downtown", "riverside"]

# What the server knows of the products on the page (the page has the same ids).
PRODUCTS: dict[str, str] = {
    "brompton": "Brompton C Line Explore",
    "kathmandu": "Cube Kathmandu Hybrid e-bike",
    "helmet": "Giro Register MIPS helmet",
}

# Client-side tools: the LLM sees them like any other; the page runs them and answers with
# an RTVI llm-function-call-result (see static/page.js). Same format as PARLEY_CLIENT_TOOLS.
CLIENT_TOOLS: list[dict[str, Any]] = [
    {
        "name": "show_product",
        "description": "Show one product on the caller's screen, with its price.",
        "parameters": {
            "type": "object",
            "properties": {
                "product_id": {
                    "type": "string",
                    "enum": list(PRODUCTS),
                    "description": "brompton (folding bike), kathmandu (e-bike) or helmet.",
                }
            },
            "required": ["product_id"],
        },
    },
    {
        "name": "set_theme",
        "description": "Switch the page between light and dark colours.",
        "parameters": {
            "type": "object",
            "properties": {"theme": {"type": "string", "enum": ["light", "dark"]}},
            "required": ["theme"],
        },
        "timeout": 5,
    },
]

agent = Agent(
    name="shop-page",
    instructions=(
        "You are the voice of the Spoke & Chain Cycles web shop. The caller is looking at "
        "the shop's page: show them the products they ask about (show_product tells you "
        "the price on the page), switch the page's colours when asked, and reserve a "
        "product for pickup at a store. Keep every answer to one or two short sentences."
    ),
    greeting="Hi! Ask me about a bike or a helmet and I'll show it to you.",
    settings={
        "static_dir": str(Path(__file__).with_name("static")),
        "client_tools": CLIENT_TOOLS,
    },
)


@agent.tool
async def reserve_for_pickup(product_id: ProductId, store: Store, ctx: CallContext) -> dict:
    """Reserve a product for the caller to pick up at a store.

    Args:
        product_id: The product to reserve.
        store: The store that holds it: downtown or riverside.
    """
    reservations: list[str] = ctx.state.setdefault("reservations", [])
    reservations.append(product_id)
    reference = f"H-{len(reservations)}{product_id[:3].upper()}"
    name = PRODUCTS[product_id]
    # A UI command: the page shows it as a toast (any command name works, see page.js).
    ctx.send_ui_command(
        "toast",
        Toast(title="Reserved", description=f"{name}, at {store}, reference {reference}"),
    )
    return {"reserved": True, "reference": reference, "product": name, "store": store}
