"""What the user said and when: the VAD (Silero, batched across sessions; RNNoise before
it when asked for, in a worker), the end-of-turn model's scores, the transcriber, and the
count of what was heard but dropped."""
