"""Speech-to-speech models over the OpenAI Realtime API (``PARLEY_LLM=realtime``)."""
