"""Audio in and out, before anything listens: levels, resampling, the bot's echo taken
out of the user's audio (AEC3, with the near-end gate while the echo path is unknown) and,
when asked for, the background noise before the VAD (RNNoise)."""
