"""Fixtures of the Hub tests: the emulator (tests/hub_emulator/fixtures.py) and Hub clients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from crawler.base.config import Settings
from crawler.hub import HubClient
from tests.hub_emulator import HubEmulator


class FakeClock:
    """Monotonic time that only moves when someone sleeps; records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock; clients from ``make_client`` sleep on it instead of in real time."""
    return FakeClock()


@pytest.fixture
def make_client(clock: FakeClock) -> Callable[..., HubClient]:
    """``make_client(emulator, **settings) -> HubClient`` aimed at the emulator, fake sleeps."""

    def make(emulator: HubEmulator, max_retries: int = 5, **settings: Any) -> HubClient:
        settings.setdefault("timeout_s", 5.0)
        return HubClient(
            Settings(hf_endpoint=emulator.endpoint, **settings),
            max_retries=max_retries,
            sleep=clock.sleep,
            clock=clock,
        )

    return make
