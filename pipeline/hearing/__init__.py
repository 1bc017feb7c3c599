"""What the user said and when: the VAD (Silero, batched across sessions), the end-of-turn
model's scores, the transcriber, and the count of what was heard but dropped."""
