"""Things used once (server/guards/once.py): a second use refused until the first expires,
in bounded memory."""

from __future__ import annotations

from server.guards.once import UsedOnce


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_second_use_is_refused_until_the_first_expires() -> None:
    clock = Clock()
    used = UsedOnce(clock=clock)
    assert used.use("token-a", expires=1060.0)
    assert not used.use("token-a", expires=1060.0)
    assert used.use("token-b", expires=1010.0)
    clock.now = 1059.9
    assert not used.use("token-a", expires=1120.0), "remembered until its expiry"
    clock.now = 1060.0
    assert used.use("token-a", expires=1120.0), "expired: it could not be used anyway"
    assert len(used) == 1, "both expired entries were forgotten"


def test_memory_is_bounded_and_the_oldest_go_first() -> None:
    clock = Clock()
    used = UsedOnce(max_keys=3, clock=clock)
    for key in "abcd":
        assert used.use(key, expires=2000.0)
    assert len(used) == 3 and used.forgotten == 1
    assert used.use("a", expires=2000.0), "the oldest was forgotten to make room"
    assert not used.use("d", expires=2000.0)
