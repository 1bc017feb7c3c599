"""What tests and benches share: the OpenAI-compatible stub, a server process, the aiortc
test client, speech and clip makers. Nothing here is imported by the server."""
