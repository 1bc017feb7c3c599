"""An agent for tests/test_phone_call.py: "press 0 to end the call", through on_keypad."""

from pipeline.agent import Agent, CallContext

agent = Agent(instructions="You answer the phone.", name="phone-desk",
              greeting="Thanks for calling. Press zero to hang up.")  # fmt: skip


@agent.on_keypad
async def keypad(ctx: CallContext, key: str) -> None:
    if key == "0":
        ctx.end_call(reason="the caller pressed 0")
