"""An agent for tests/test_embedded_tools.py: one typed tool the embedded LLM must call."""

from pipeline.agent import Agent

agent = Agent(
    instructions="You are a weather assistant. Answer in one short spoken sentence.",
    name="weather",
)


@agent.tool
def get_weather(city: str) -> dict:
    """Today's weather forecast for a city.

    Args:
        city: The city, as the caller says it.
    """
    return {"city": city, "forecast": "sunny", "temperature_celsius": 21}
