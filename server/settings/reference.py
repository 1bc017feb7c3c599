"""The settings reference, docs/settings.md, made from the :class:`Settings` fields.

Each field is listed under the module that declares it, with its environment variable
(``PARLEY_<NAME>``, and any alias such as ``OPENAI_API_KEY``), its type and bounds, its
default and its ``Field(description=...)``. The page is generated, never edited by hand::

    python -m server.settings.reference > docs/settings.md

``tests/test_docs.py`` fails when the file and :func:`render` differ.
"""

from __future__ import annotations

import json
import sys
import types
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import AliasChoices, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode

from server.settings import Settings

COMMAND = "python -m server.settings.reference > docs/settings.md"

# Fields declared without a description, and what they are. A new field should carry its
# own Field(description=...); this table only covers the ones that predate the reference.
_UNDESCRIBED = {
    "log_level": "Lowest level of the lines logged.",
    "vad_confidence": "Silero VAD: the speech probability a 32 ms window needs to count as speech.",
    "vad_start_secs": "Silero VAD: seconds of speech before the VAD reports that speech started.",
    "user_turn_stop_timeout": "Fallback: end the user's turn if no stop strategy ended it "
    "within this many seconds.",
    "stt": "Who transcribes: local (the embedded model), openai (the OpenAI-compatible "
    "endpoint) or auto (openai when an API key or base URL is set, else local).",
    "llm": "Who answers: local, openai or auto, as for stt.",
    "tts": "Who speaks: local, openai or auto, as for stt.",
    "openai_api_key": "Key for the OpenAI-compatible endpoint.",
    "openai_base_url": "Base URL of the OpenAI-compatible endpoint (vLLM, llama.cpp server, "
    "Ollama, …). Unset: OpenAI's.",
    "llm_model": "Model name of the LLM in use (openai: gpt-4o-mini; unset for anthropic or "
    "google: the vendor's default, claude-haiku-4-5 or gemini-2.5-flash).",
    "stt_model": "Model name of the OpenAI-compatible STT.",
    "tts_model": "Model name of the OpenAI-compatible TTS.",
    "tts_voice": "Voice of the OpenAI-compatible TTS.",
}

_BOUNDS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)


def groups() -> list[tuple[str, str, list[tuple[str, FieldInfo]]]]:
    """``(module, summary, [(field name, field)])`` per settings module, in field order."""
    owners: dict[str, type[BaseModel]] = {}
    for base in Settings.__mro__:
        if base is Settings or not isinstance(base, type) or not issubclass(base, BaseModel):
            continue
        for name in getattr(base, "__annotations__", {}):
            if name in Settings.model_fields:
                owners.setdefault(name, base)
    found: dict[str, tuple[str, list[tuple[str, FieldInfo]]]] = {}
    for name, field in Settings.model_fields.items():
        owner = owners.get(name, Settings)
        module = sys.modules[owner.__module__]
        summary = (module.__doc__ or owner.__doc__ or "").strip()
        entry = found.setdefault(owner.__module__, (" ".join(summary.split()), []))
        entry[1].append((name, field))
    return [(module, summary, fields) for module, (summary, fields) in found.items()]


def env_names(name: str, field: FieldInfo) -> list[str]:
    """The environment variables that set a field."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{Settings.model_config.get('env_prefix', '')}{name}".upper()]


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``list[str]``, ``auto, on, off``, ``float``."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return ", ".join(str(arg).lower() if isinstance(arg, bool) else str(arg) for arg in args)
    if origin in (Union, types.UnionType):
        parts = [type_name(arg) for arg in args if arg is not type(None)]
        text = " or ".join(parts)
        return f"{text} (optional)" if type(None) in args else text
    if origin is not None:
        inner = ", ".join(type_name(arg) for arg in args)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "object"
        if issubclass(annotation, Path):
            return "path"
        return annotation.__name__
    return str(annotation)


def bounds(field: FieldInfo) -> str:
    """A field's bounds: ``≥ 0, ≤ 65535``, or the pattern a string must match."""
    found = []
    for kind, attribute, sign in _BOUNDS:
        for item in field.metadata:
            if isinstance(item, kind):
                found.append(f"{sign} {_value(getattr(item, attribute))}")
    for item in field.metadata:
        pattern = getattr(item, "pattern", None)
        if isinstance(pattern, str):
            found.append(f"matching `{pattern}`")
    return ", ".join(found)


def default_text(field: FieldInfo) -> str:
    """A field's default as it would be written in the environment."""
    if field.default_factory is None and field.default is PydanticUndefined:
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    return f"`{_value(value)}`"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def description(name: str, field: FieldInfo) -> str:
    """A field's description, or the note for one declared without."""
    return field.description or _UNDESCRIBED.get(name, "")


def render() -> str:
    """docs/settings.md."""
    out = [
        "# Settings",
        "",
        "<!-- Generated from the Settings fields (server/settings/) by",
        f"     {COMMAND}",
        "     Do not edit: change the Field(description=...) and run that command. -->",
        "",
        "One `Settings` object (`server/settings/`), read from environment variables",
        "`PARLEY_<NAME>`. Lists and objects are JSON (some lists also take comma-separated",
        "values, as marked); booleans are `true`/`false`. An agent file's `settings`",
        "are defaults the environment overrides",
        "([Build your agent](build-your-agent.md#settings)).",
        "Invalid values stop the server at start with a message naming the setting.",
        "",
        "The settings by module:",
        "",
    ]
    sections = groups()
    for module, _, fields in sections:
        short = module.rsplit(".", 1)[-1]
        out.append(f"- [`{short}`](#{short}): {len(fields)} settings")
    for module, summary, fields in sections:
        path = module.replace(".", "/") + ".py"
        out += ["", f"## {module.rsplit('.', 1)[-1]}", ""]
        if summary:
            out += [_cell(summary), ""]
        out += [
            f"Declared in [`{path}`](../{path}).",
            "",
            "| variable | type | default | description |",
            "| --- | --- | --- | --- |",
        ]
        for name, field in fields:
            variables = " / ".join(f"`{env}`" for env in env_names(name, field))
            kind = type_name(field.annotation)
            if any(item is NoDecode for item in field.metadata):
                kind += " (JSON or comma-separated)"
            limit = bounds(field)
            kind = _cell(f"{kind}, {limit}" if limit else kind)
            out.append(
                f"| {variables} | {kind} | {_cell(default_text(field))} "
                f"| {_cell(description(name, field))} |"
            )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
