"""Joining text that arrives in parts (transcripts, spoken sentences, LLM tokens)."""

from __future__ import annotations

# Punctuation that attaches to the word before it: no space is added in front of it.
_ATTACHING = frozenset(",.!?;:)]}%'\"…")


def join_text(parts: list[tuple[str, bool]]) -> str:
    """Join ``(text, includes_spaces)`` parts.

    Parts that carry their own spacing (LLM tokens) are concatenated as they are; parts
    that do not (transcripts, TTS sentences) are separated by one space, except before
    punctuation that attaches to the previous word.
    """
    out: list[str] = []
    last = ""
    for text, includes_spaces in parts:
        if not text:
            continue
        if (
            out
            and not includes_spaces
            and not last[-1].isspace()
            and not text[0].isspace()
            and text[0] not in _ATTACHING
        ):
            out.append(" ")
        out.append(text)
        last = text
    return "".join(out).strip()
