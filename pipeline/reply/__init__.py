"""The bot's turn: LLM stream → sentences → TTS → the paced output, and replies prepared
before the user's turn has ended."""
