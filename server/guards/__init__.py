"""Guards every layer above may use: API keys and session ownership, rate limits, strict
JSON from clients. They import nothing else of the server."""
