"""Giving memory back when the server goes idle: the garbage collector, then the heap.

A closed call lives on in reference cycles (aiortc's and the session's own) until a
full collection, which Python runs rarely; and glibc keeps freed heap pages mapped
(its ``free`` returns memory to the system only from the heap's top). Both are cheap to
fix once no call is streaming, when a short pause harms no one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

from loguru import logger


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _find_malloc_trim()


def release_memory() -> None:
    """Collect garbage, then return the heap's free pages to the system (glibc)."""
    collected = gc.collect()
    if _malloc_trim is not None:
        _malloc_trim(0)
    logger.debug("idle: collected {} objects, heap trimmed", collected)
