"""The stub in a process of its own, for load runs.

In the load generator's process the stub shares one GIL with every simulated client,
so at 20 clients its fixed delays stretch with the generator's load, and that stretch
was counted as the server's. A provider's latency does not depend on our callers; a
process of its own (``python -m testkit.openai_stub.process CONFIG_JSON``) keeps it so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from testkit.openai_stub.audio import spoken
from testkit.openai_stub.server import OpenAIStub


class StubProcess:
    """An :class:`OpenAIStub` in a child process, its ``config`` fields set from ``fields``
    (plain values only). ``base_url``, ``api_key`` and ``stop`` as the stub's."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "testkit.openai_stub.process", json.dumps(fields)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line:
            self.stop()
            raise RuntimeError("the stub process did not start")
        self.base_url, self.api_key = line.split(" ")

    def stop(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()  # the child's cue to stop
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def main() -> None:
    stub = OpenAIStub()
    for name, value in json.loads(sys.argv[1]).items():
        setattr(stub.config, name, value)
    if stub.config.tts_voice == "speech":
        spoken(1)  # made once, before the first request waits for it
    stub.start()
    print(stub.base_url, stub.api_key, flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    stub.stop()


if __name__ == "__main__":
    main()
