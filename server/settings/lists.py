"""List settings from the environment: a JSON list, or comma-separated values.

Such a field is annotated ``NoDecode`` (pydantic-settings then passes the variable's text
as it is, instead of insisting on JSON) and ``BeforeValidator(split_list)``.
"""

from __future__ import annotations

import json
from typing import Any


def split_list(value: Any) -> Any:
    """A JSON list, or a comma-separated string, from the environment."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [item.strip() for item in text.split(",") if item.strip()]
    return value
