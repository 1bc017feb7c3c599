"""An agent for tests/test_agent_session.py: tools with state (one a plain def), a handoff,
ending the call, and every hook, each reporting what it saw so a test can check it."""

import json
import os
from pathlib import Path

from pipeline.agent import Agent, CallContext

returns = Agent(instructions="You are the returns desk.", name="returns")


@returns.tool
async def start_return(order_id: str, ctx: CallContext) -> dict:
    """Start a return.

    Args:
        order_id: The order to return.
    """
    return {"return_id": f"R-{order_id}", "handled_by": ctx.agent.name}


agent = Agent(instructions="You are the front desk.", name="desk")


@agent.tool
def get_order_status(order_id: str, ctx: CallContext) -> dict:
    """Look up an order.

    Args:
        order_id: The order number the customer reads out.
    """
    ctx.state["lookups"] = ctx.state.get("lookups", 0) + 1
    return {"order_id": order_id, "status": "shipped"}


@agent.tool
async def transfer_to_returns() -> Agent:
    """Transfer the caller to the returns desk."""
    return returns


@agent.tool(run_llm=False)
async def end_call(ctx: CallContext) -> str:
    """End the call when the caller says goodbye."""
    ctx.end_call(goodbye="Goodbye!")
    return "ending"


@agent.on_call_start
async def started(ctx: CallContext) -> None:
    ctx.state["request_data"] = ctx.request_data
    ctx.send_server_message({"hook": "start", "call_id": ctx.call_id})


@agent.on_user_turn
def user_turn(ctx: CallContext, text: str) -> None:
    ctx.send_server_message({"hook": "turn", "text": text})


@agent.on_call_end
def ended(ctx: CallContext, reason: str) -> None:
    out = Path(os.environ["AGENT_TEST_OUT"]) / f"{ctx.call_id}.json"
    out.write_text(json.dumps({"reason": reason, "state": ctx.state, "agent": ctx.agent.name}))


@agent.on_client_message("state")
async def state(ctx: CallContext, data: dict) -> dict:
    return {"state": ctx.state, "agent": ctx.agent.name, "asked": data}
