"""The guard of tests/unit/conftest.py: a unit test that starts a process or the Hub emulator
fails at once, with a message that says where such a test belongs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.hub_emulator.server import HubEmulator


def test_a_subprocess_is_refused() -> None:
    with pytest.raises(AssertionError, match="tests/unit starts no subprocess: move"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(AssertionError, match="starts no subprocess"):
        os.system("true")


def test_the_hub_emulator_is_refused() -> None:
    with pytest.raises(AssertionError, match="starts no Hub emulator"), HubEmulator():
        pass
