"""Model services behind small interfaces: speech-to-text, the LLM, text-to-speech."""
