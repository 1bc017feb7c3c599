"""The LLM's context: typed messages, the one conversion to OpenAI's format, the token
budget and summaries, and what the page and the camera add to it."""
