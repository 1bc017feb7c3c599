"""A bike shop's front desk on the phone: looks up orders, books workshop slots, hands
returns to the returns desk (returns.py) and hangs up with a goodbye.

    PARLEY_AGENT=examples/bike_shop/agent.py make run

The files beside this one (shop.py, returns.py) import as top-level modules: Parley puts
an agent file's folder on sys.path before it runs it.
"""

from __future__ import annotations

from time import monotonic
from typing import Any, Literal

from loguru import logger
from returns import returns_desk
from shop import REPAIR_SLOTS, SHOP, end_call, find_order

from pipeline.agent import Agent, CallContext

Day = Literal["monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]

agent = Agent(
    name="front-desk",
    instructions=(
        f"You are the front desk of {SHOP}, a bike shop, on the phone. You can look up "
        "orders and book a workshop slot for a repair or a service. Returns are handled by "
        "the returns desk: transfer the caller there. Keep every answer to one or two short "
        "spoken sentences, and never read out more than three options. When the caller is "
        "done or says goodbye, end the call."
    ),
    greeting=f"Hi, thanks for calling {SHOP}! How can I help?",
)
agent.tool(run_llm=False)(end_call)  # the goodbye is the last word: no LLM answer after it


# A plain def runs in a worker thread, so a blocking database client would be fine here.
@agent.tool
def get_order_status(order_id: str, ctx: CallContext) -> dict[str, Any]:
    """Look up an order: what it is and where it is.

    Args:
        order_id: The order number the caller reads out, like A1042.
    """
    found = find_order(order_id)
    if found is None:
        return {"found": False, "why": f"no order {order_id}: ask the caller to check it"}
    key, order = found
    ctx.state["order_id"] = key  # the returns desk and the booking pick it up
    return {"found": True, "order_id": key, **{k: order[k] for k in ("item", "status", "detail")}}


@agent.tool
async def find_repair_slots(day: Day) -> dict[str, Any]:
    """The free workshop slots on a day.

    Args:
        day: The day the caller would like to bring the bike in.
    """
    return {"day": day, "free": REPAIR_SLOTS.get(day, [])}


@agent.tool
async def book_repair(day: Day, time: str, problem: str, ctx: CallContext) -> dict[str, Any]:
    """Book a workshop slot. Booking again in the same call moves the booking.

    Args:
        day: The day of the slot.
        time: The slot's start time as find_repair_slots gave it, like 09:30.
        problem: What is wrong with the bike, in a few words.
    """
    if time not in REPAIR_SLOTS.get(day, []):
        return {"booked": False, "why": f"{time} is not free on {day}", "free": REPAIR_SLOTS[day]}
    moved_from = ctx.state.get("booking")
    booking = {"day": day, "time": time, "problem": problem}
    if order_id := ctx.state.get("order_id"):
        booking["order_id"] = order_id  # the bike from the order looked up in this call
    ctx.state["booking"] = booking
    return {"booked": True, **booking, "moved_from": moved_from}


@agent.tool
async def transfer_to_returns() -> Agent:
    """Transfer the caller to the returns desk, for anything about returning an order."""
    return returns_desk  # from the next answer on: its instructions and tools


@agent.on_call_start
async def call_started(ctx: CallContext) -> None:
    ctx.state["started_at"] = monotonic()
    logger.info("{}: call {} started", SHOP, ctx.call_id)


@agent.on_call_end  # the first agent's hooks hold for the whole call, handoffs included
async def call_ended(ctx: CallContext, reason: str) -> None:
    # A summary a shop would write to its CRM; here, one log line.
    seconds = monotonic() - ctx.state.get("started_at", monotonic())
    logger.info(
        "{}: call {} ended ({}) after {:.0f}s; agent={} booking={} return={}",
        SHOP,
        ctx.call_id,
        reason,
        seconds,
        ctx.agent.name if ctx.agent else "-",
        ctx.state.get("booking"),
        ctx.state.get("return"),
    )
