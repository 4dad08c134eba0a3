"""tests/unit runs in-process: no subprocess and no Hub emulator (the CLI in a subprocess is in
tests/e2e, the emulator in tests/hub and beyond). Starting either here fails the test at once, so
the fast set stays fast (``make test``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from tests.hub_emulator.server import HubEmulator


def _refuse(what: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"tests/unit starts no {what}: move this test to tests/e2e (CLI in a subprocess) or "
            "tests/hub (Hub emulator), or test the library call in-process"
        )

    return refuse


@pytest.fixture(autouse=True)
def _in_process_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse("subprocess"))
    monkeypatch.setattr(HubEmulator, "start", _refuse("Hub emulator"))
    yield
