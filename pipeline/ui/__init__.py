"""The UI protocol: what the client's page shows, its state, and the tools that act on it."""
