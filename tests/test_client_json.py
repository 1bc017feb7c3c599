"""JSON from clients: strict and shallow enough to be listed back."""

from __future__ import annotations

import json

import pytest

from server.guards import client_json


@pytest.mark.parametrize("text", ["NaN", '{"a": Infinity}', "[-Infinity]"])
def test_non_finite_numbers_are_not_json(text: str) -> None:
    json.loads(text)  # what Python's parser alone would take
    with pytest.raises(ValueError, match="is not JSON"):
        client_json.loads(text)


def test_depth_counts_lists_and_objects() -> None:
    assert client_json.depth(5) == 0
    assert client_json.depth({"a": [1, {"b": []}]}) == 4
    assert client_json.depth([[]] * 3) == 2


def test_check_depth() -> None:
    ok = json.loads("[" * 32 + "]" * 32)
    assert client_json.check_depth(ok) is ok
    with pytest.raises(ValueError, match="nested deeper than 32 levels"):
        client_json.check_depth(json.loads("[" * 500 + "]" * 500))
