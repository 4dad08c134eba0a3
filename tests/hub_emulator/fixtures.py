"""pytest fixtures for the Hub emulator, registered for every test by tests/conftest.py
(``pytest_plugins``): a test names them as arguments, nothing to import.

``world_cache`` builds the world's files once per session. ``hub`` is a fresh emulator per test
with tests.fixtures.world.WORLD loaded (mutate it, inject faults freely; a few ms to start
because the GGUF files are built once per session).
``shared_hub`` is one emulator for the session: read-only use, its faults and log are cleared
before each test that asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.world import WORLD, FileCache, populate
from tests.hub_emulator.server import HubEmulator


@pytest.fixture(scope="session")
def world_cache(tmp_path_factory: pytest.TempPathFactory) -> FileCache:
    """Where the world's GGUF files are built, once per session (sparse: a few MB on disk)."""
    return FileCache(tmp_path_factory.mktemp("hub-world"))


@pytest.fixture
def hub(world_cache: FileCache) -> Iterator[HubEmulator]:
    """A fresh emulator serving WORLD on 127.0.0.1, stopped after the test."""
    emulator = HubEmulator()
    populate(emulator.state, world_cache, WORLD)
    with emulator:
        yield emulator


@pytest.fixture(scope="session")
def _shared_hub(world_cache: FileCache) -> Iterator[HubEmulator]:
    emulator = HubEmulator()
    populate(emulator.state, world_cache, WORLD)
    with emulator:
        yield emulator


@pytest.fixture
def shared_hub(_shared_hub: HubEmulator) -> HubEmulator:
    """The session's emulator (do not mutate its repos), with faults and log cleared."""
    _shared_hub.reset()
    return _shared_hub
