"""Spoke & Chain Cycles' records, as a small in-memory stand-in for the shop's database,
and the goodbye tool both desks offer."""

from __future__ import annotations

from typing import Any, TypedDict

from pipeline.agent import CallContext

SHOP = "Spoke & Chain Cycles"


class Order(TypedDict):
    customer: str
    item: str
    status: str
    detail: str
    returnable: bool


ORDERS: dict[str, Order] = {
    "A1042": {
        "customer": "Maya Chen",
        "item": "Brompton C Line Explore, 6-speed, racing green",
        "status": "shipped",
        "detail": "with DHL, tracking JD014600003827, due Thursday",
        "returnable": True,
    },
    "A1043": {
        "customer": "Tom Okafor",
        "item": "Cube Kathmandu Hybrid EXC 750 e-bike, size L",
        "status": "ready for pickup",
        "detail": "at the Riverside store, held until Saturday",
        "returnable": True,
    },
    "A1047": {
        "customer": "Lena Fischer",
        "item": "Shimano Deore M6100 12-speed chain",
        "status": "delivered",
        "detail": "left with a neighbour on Monday",
        "returnable": True,
    },
    "A1051": {
        "customer": "Sam Reyes",
        "item": "custom wheelset, DT Swiss 350 hubs on H+Son rims",
        "status": "in the workshop",
        "detail": "being built, ready in about a week",
        "returnable": False,  # built to order: final sale
    },
}

# Free workshop slots by day. A real shop would ask its booking system; this one only
# holds a booking for the length of a call (see book_repair).
REPAIR_SLOTS: dict[str, list[str]] = {
    "monday": ["09:00", "11:30", "15:00"],
    "tuesday": ["10:00", "14:00"],
    "wednesday": ["09:30", "16:00"],
    "thursday": ["11:00"],
    "friday": ["09:00", "13:30", "15:30"],
    "saturday": ["10:00"],
}


def find_order(order_id: str) -> tuple[str, Order] | None:
    """The order and its canonical number; callers say "a 10 42" as often as "A1042"."""
    key = "".join(order_id.split()).upper()
    order = ORDERS.get(key)
    return (key, order) if order is not None else None


async def end_call(ctx: CallContext) -> dict[str, Any]:
    """End the call once the caller has nothing more to ask or says goodbye."""
    booking = ctx.state.get("booking")
    if booking:
        goodbye = f"See you {booking['day'].title()} at {booking['time']}. Goodbye!"
    else:
        goodbye = f"Thanks for calling {SHOP}. Goodbye!"
    ctx.end_call(goodbye=goodbye)
    return {"ending": True}
