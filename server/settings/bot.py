"""What the bot is and offers: its prompt and greeting, the tools (built-in, UI, client-side)
and how much of their calls the client sees, and the context's token budget and
summaries."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

ReportLevel = Literal["none", "name", "full"]


class ClientToolDefinition(BaseModel):
    """A tool the client runs (RTVI ``llm-function-call-result``), offered to the LLM."""

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    report_level: ReportLevel | None = None
    timeout: float | None = Field(None, gt=0, description="Default: client_tool_timeout.")
    cancel_on_interruption: bool = True

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('parameters must be a JSON schema with "type": "object"')
        return value


class ConversationSettings(BaseModel):
    """The bot's prompt and greeting, its tools, and its context's budget."""

    system_prompt: str = Field(
        "You are Parley, a friendly voice assistant. Your answers are spoken aloud, so keep "
        "them short: one or two sentences, plain words, no lists, no markdown, no emoji.",
        description="The LLM's system prompt.",
    )
    greeting: str = Field(
        "Hello! How can I help you today?",
        description="Spoken when the client is ready; empty for no greeting.",
    )
    tools_enabled: bool = Field(
        True, description="Offer the built-in tools to LLMs that can call them."
    )
    demo_tools: bool = Field(
        False,
        description="Also offer research_topic, an example async tool that consults no "
        "sources (a demo of progress updates; never for real users).",
    )
    ui_tools: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Offer the UI tools (toast, navigate, highlight, focus, click, select, "
        "fill) to LLMs that can call tools: auto = once the client has sent a ui-snapshot.",
    )
    ui_state_max_chars: int = Field(
        4000, ge=200, description="Longest <ui_state> outline of the client's UI the LLM gets."
    )
    ui_snapshot_max_nodes: int = Field(
        500, ge=10, description="Elements kept from a client's ui-snapshot (the rest pruned)."
    )
    ui_events_to_llm: bool = Field(
        False, description="Note each ui-event from the client in the LLM context."
    )
    ui_job_groups: bool = Field(
        True, description="Report async tool calls of one LLM response as a ui-job-group."
    )
    function_call_report_level: ReportLevel = Field(
        "name", description="How much of a tool call the client sees: none, name, or full."
    )
    function_call_report_levels: dict[str, ReportLevel] = Field(
        default_factory=dict,
        description='Per-tool report levels over the default, JSON: {"get_current_time": "full"}.',
    )
    client_tools: list[ClientToolDefinition] = Field(
        default_factory=list,
        description="Tools the client runs, JSON: "
        '[{"name": "get_location", "description": "...", "parameters": {JSON schema}}].',
    )
    client_tool_timeout: float = Field(
        10.0, gt=0, description="Seconds a client has to answer a client-side tool call."
    )
    context_summarization: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Summarize older history when the context nears context_max_tokens: "
        "auto = on for the OpenAI-compatible LLM (the embedded one trims to its window).",
    )
    context_max_tokens: int = Field(
        8000,
        ge=0,
        description="The most conversation history (estimated tokens after the system "
        "prompt) the LLM is sent; summaries start at 3/4 of it, the oldest messages are "
        "dropped past it. 0: no limit.",
    )
    context_summary_max_tokens: int = Field(
        1000, gt=0, description="max_tokens of the summary call."
    )
