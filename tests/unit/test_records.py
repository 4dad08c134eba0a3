"""crawler.base.records.replaced against dataclasses.replace."""

from __future__ import annotations

import dataclasses

import pytest

from crawler.base.records import replaced
from crawler.fit.estimate import RunConfig


@dataclasses.dataclass(frozen=True, slots=True)
class _Checked:
    a: int
    b: str = "x"

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@dataclasses.dataclass(frozen=True)
class _Derived:
    a: int
    b: int = 0
    total: int = dataclasses.field(init=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", self.a + self.b)


@dataclasses.dataclass(frozen=True)
class _KeywordOnly:
    a: int
    b: int = dataclasses.field(default=0, kw_only=True)


def test_replaced_is_dataclasses_replace() -> None:
    cfg = RunConfig(ctx=4096, type_k="q8_0", n_gpu_layers=12)
    for changes in ({}, {"ctx": 8192}, {"mtp": True, "type_v_draft": "q4_0", "n_gpu_layers": None}):
        assert replaced(cfg, **changes) == dataclasses.replace(cfg, **changes)
        assert cfg.replace(**changes) == dataclasses.replace(cfg, **changes)
    assert replaced(_Checked(1), b="y") == _Checked(1, "y")
    with pytest.raises(ValueError, match="a < 0"):
        replaced(_Checked(1), a=-1)  # __init__ and __post_init__ run
    # Fields outside __init__ or keyword-only: dataclasses.replace's own answer.
    assert replaced(_Derived(1, 2), b=5).total == 6
    assert replaced(_KeywordOnly(1, b=2), a=3) == _KeywordOnly(3, b=2)
    for obj in (cfg, _Checked(1), _Derived(1)):
        with pytest.raises(TypeError, match="nope"):
            replaced(obj, nope=1)
