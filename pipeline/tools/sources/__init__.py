"""Where tools come from besides Python code: MCP servers (:mod:`.mcp`) and plain HTTP
endpoints (:mod:`.http`). Each turns its source into :class:`pipeline.tools.registry.ToolSpec`
entries of the shared registry; the runner calls them like any other tool."""
