"""Making the agent yours: the agent file, MCP servers and HTTP tools."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipeline.tools.sources.config import HTTPToolConfig, MCPServerConfig


class AgentSettings(BaseModel):
    """Where the agent's own instructions, hooks and tools come from."""

    agent: str | None = Field(
        None,
        description="The agent file: path/to/agent.py, package.module or module:attribute "
        "(default attribute: agent). See docs/build-your-agent.md.",
    )
    mcp_servers: list[MCPServerConfig] = Field(
        default_factory=list,
        description='MCP tool servers, JSON list: {"name", "command": [...], "env"?} (stdio) '
        'or {"name", "url", "headers"?} (streamable HTTP); "timeout"? seconds per call.',
    )
    http_tools: list[HTTPToolConfig] = Field(
        default_factory=list,
        description="Tools served by HTTP endpoints, JSON list of {name, description, "
        "parameters, url, method?, headers?, timeout?}; header values may use ${ENV_VAR}.",
    )
