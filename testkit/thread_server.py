"""An ASGI app served by uvicorn on 127.0.0.1 in a thread of its own: the fakes of
services at the edge (a provider's REST API, a tool's HTTP endpoint) that a server in
another process, or the test's own event loop, reaches over a real socket."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


@contextmanager
def serve_in_thread(app: Any, what: str = "the test server") -> Iterator[str]:
    """Serve ``app`` until the block ends; its base URL (``http://127.0.0.1:<port>``)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_config=None, log_level="critical", access_log=False,
                            lifespan="off", timeout_graceful_shutdown=1)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.005)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
