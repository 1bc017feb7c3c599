"""server/process/blas_threads.py: numpy's BLAS runs on one thread once the server has
started, so its idle workers no longer spin beside the end-of-turn model (one prediction
cost twice its CPU so)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from server.process.blas_threads import limit_blas_threads
from testkit.app_server import serve_app
from testkit.openai_stub import OpenAIStub
from testkit.openai_stub import openai_stub_fixture as openai_stub_fixture


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@pytest.fixture
def restored() -> Iterator[None]:
    """What this process's BLAS pools had, set again after the test."""
    with threadpool_limits(limits=None):  # restores the original limits on exit
        yield


def test_numpy_has_a_blas_to_limit() -> None:
    np.ones((256, 256)) @ np.ones((256, 256))  # numpy's BLAS is loaded
    assert blas_threads(), "threadpoolctl found no BLAS: the limit would do nothing"


def test_the_limit_sets_every_blas_pool_to_one_thread(restored: None) -> None:
    threadpool_limits(limits=2, user_api="blas")  # as on a machine with two cores or more
    limit_blas_threads()
    assert blas_threads() and all(n == 1 for n in blas_threads())


async def test_a_started_server_runs_numpy_on_one_thread(
    restored: None, openai_stub: OpenAIStub, tmp_path: Path
) -> None:
    threadpool_limits(limits=2, user_api="blas")
    async with serve_app(openai_stub, data_dir=str(tmp_path)):
        assert all(n == 1 for n in blas_threads())
