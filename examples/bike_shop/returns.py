"""The returns desk: the front desk (agent.py) hands the call here. It reads the order the
front desk looked up from the call's state, so the caller need not repeat it."""

from __future__ import annotations

from typing import Any

from shop import SHOP, end_call, find_order

from pipeline.agent import Agent, CallContext

returns_desk = Agent(
    name="returns",
    instructions=(
        f"You are the returns desk of {SHOP}, on the phone. Find out why the caller wants "
        "to return their order, then start the return. Keep every answer to one or two "
        "short spoken sentences. When the caller is done, end the call."
    ),
)
returns_desk.tool(run_llm=False)(end_call)


@returns_desk.tool
def start_return(reason: str, ctx: CallContext, order_id: str | None = None) -> dict[str, Any]:
    """Start a return and get its return number.

    Args:
        reason: Why the caller is returning it, in a few words.
        order_id: The order to return; leave it out for the order already discussed.
    """
    order_id = order_id or ctx.state.get("order_id")
    if not order_id:
        return {"started": False, "why": "no order yet: ask for the order number"}
    found = find_order(order_id)
    if found is None:
        return {"started": False, "why": f"there is no order {order_id}"}
    key, order = found
    if not order["returnable"]:
        return {"started": False, "why": f"{order['item']} was built to order: final sale"}
    return_id = f"R-{key}"
    ctx.state["return"] = {"return_id": return_id, "order_id": key, "reason": reason}
    return {
        "started": True,
        "return_id": return_id,
        "item": order["item"],
        "next": "a prepaid label goes to the email on the order; refund within 5 days of arrival",
    }
