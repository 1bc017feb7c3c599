"""Readiness check names are the keys of ``/ready``'s answer: each must be unique, or
one check would hide another's failure."""

from __future__ import annotations

import pytest

from server.api.readiness import NotReady, Readiness


def failing() -> None:
    raise NotReady("disk full")


def passing() -> None:
    return None


def test_a_second_check_under_a_taken_name_is_refused() -> None:
    readiness = Readiness()
    readiness.add("storage", failing)
    with pytest.raises(ValueError, match="'storage' is already registered"):
        readiness.add("storage", passing)
    assert [name for name, _check, _advisory in readiness.checks] == ["storage"]


async def test_every_check_keeps_its_own_result() -> None:
    readiness = Readiness()
    readiness.add("storage", failing)
    readiness.add("disk", passing)
    results = {r.name: r for r in await readiness.run()}
    assert results["storage"].ok is False and results["storage"].detail == "disk full"
    assert results["disk"].ok is True


def test_a_blank_name_is_refused() -> None:
    with pytest.raises(ValueError, match="name"):
        Readiness().add("  ", passing)
