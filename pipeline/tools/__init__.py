"""Tools: the registry and its schema, binding and running calls (async ones too, with
their wire protocol), built-in, client-side and the sources (MCP, HTTP)."""
