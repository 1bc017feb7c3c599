"""One call's lifetime: the session, the registry of all sessions, drain on shutdown,
and the voice pipeline a session runs."""
