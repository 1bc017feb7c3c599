"""How an operator declares tool sources (``PARLEY_MCP_SERVERS``, ``PARLEY_HTTP_TOOLS``,
or an agent file's ``mcp_servers=`` / ``http_tools=``): validated at start, so a typo
stops the server with the field at fault instead of failing the first call."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
DEFAULT_TOOL_TIMEOUT = 10.0


class MCPServerConfig(BaseModel):
    """One MCP server: a command run over stdio, or a streamable-HTTP ``url``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,32}$", description="Its name in logs, /health.")
    command: list[str] | None = Field(None, min_length=1, description="argv of a stdio server.")
    env: dict[str, str] | None = Field(None, description="Extra environment of the command.")
    url: str | None = Field(None, description="The streamable-HTTP endpoint (http or https).")
    headers: dict[str, str] | None = Field(None, description="HTTP headers; ${VAR} expands.")
    timeout: float = Field(DEFAULT_TOOL_TIMEOUT, gt=0, description="Seconds one call may take.")

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name}: give either command or url")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name}: url must be http:// or https://")
        if self.env is not None and self.command is None:
            raise ValueError(f"MCP server {self.name}: env applies to a command only")
        if self.headers is not None and self.url is None:
            raise ValueError(f"MCP server {self.name}: headers apply to a url only")
        return self


class HTTPToolConfig(BaseModel):
    """One tool served by an HTTP endpoint: the arguments go as JSON (as the query for
    GET), the response body is the result."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=_TOOL_NAME)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    url: str
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict, description="${VAR} expands.")
    timeout: float = Field(DEFAULT_TOOL_TIMEOUT, gt=0)

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('parameters must be a JSON schema with "type": "object"')
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("url must be http:// or https://")
        return value
