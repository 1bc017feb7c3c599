"""The HTTP API: signalling, sessions, health and readiness, history, auth and limits."""
