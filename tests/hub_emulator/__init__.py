"""A local Hugging Face Hub for tests: REST API, resolve, a CDN origin, faults, a request log.

Start one with ``HubEmulator().start()`` (or the ``hub`` fixture of tests/hub/conftest.py), fill it
through ``emulator.state`` (see tests/fixtures/world.py), and aim a client at ``emulator.endpoint``.
"""

from __future__ import annotations

from tests.hub_emulator.faults import Fault, FaultPlan, Rule
from tests.hub_emulator.reply import Reply
from tests.hub_emulator.server import HubEmulator, RequestRecord
from tests.hub_emulator.state import Blob, Commit, HubState, Repo

__all__ = [
    "Blob",
    "Commit",
    "Fault",
    "FaultPlan",
    "HubEmulator",
    "HubState",
    "Reply",
    "Repo",
    "RequestRecord",
    "Rule",
]
