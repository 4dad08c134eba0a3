"""Fit crawler/ranking/speed.py's constants on the fitting rows of the decode-speed fixture.

``python tools/fit_speed.py`` prints the constants (paste them into crawler/ranking/speed.py) and the
errors on fitting and held-out rows. The model is linear in its constants once each type's
efficiency is written as its reciprocal, so the fit is a non-negative least squares on seconds
per token (or per MTP cycle), each row weighted by its own time (relative errors). The
features are read off the model itself: every constant at zero but one.

Nothing here is imported by the library.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.ranking import speed
from crawler.ranking.speed import expected_tokens
from tests.fixtures.llamacpp.speed import Row, held_out, predict, rows

TYPES = ("Q3_K", "IQ3_XXS", "IQ4_XS", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0")
#: Fitted scalars. Tried and left out of the model: a cost per layer or per token (with four
#: architectures collinear with the weight bytes: the fit drove efficiencies above 1), per
#: attention layer (fitted to 0), a verify cost per drafted token apart from the draft cost
#: (both scale with k), a cost per host MoE layer (one fitting row has experts on host) and a
#: cost per cycle with a rejected draft (fitted to 1 us).
SCALARS = ("MOE_LAYER_S", "QCACHE_LAYER_S", "SERVER_S",
           "DRAFT_S", "ACCEPT_S")  # fmt: skip
DEPTHS = ("f16", "quant")
HUGE = 1e300


def names() -> list[str]:
    """Parameter names, in feature order."""
    return (
        [f"1/eff {t}" for t in TYPES]
        + list(SCALARS)
        + [f"DEPTH_S {d}" for d in DEPTHS]
        + ["1/HOST_EFF"]
    )


def _set(values: list[float]) -> None:
    it = iter(values)
    eff = {t: (1.0 / v if v > 0 else HUGE) for t, v in zip(TYPES, it, strict=False)}
    eff.update(dict.fromkeys(("F16", "BF16", "F32"), eff["Q8_0"]))
    speed.TYPE_EFFICIENCY.clear()
    speed.TYPE_EFFICIENCY.update(eff)
    for name in SCALARS:
        setattr(speed, name, next(it))
    speed.DEPTH_S.update({d: next(it) for d in DEPTHS})
    v = next(it)
    speed.HOST_EFF = 1.0 / v if v > 0 else HUGE


@contextmanager
def constants(values: list[float]) -> Iterator[None]:
    """The model with ``values`` as its constants, restored afterwards."""
    saved = (dict(speed.TYPE_EFFICIENCY), {n: getattr(speed, n) for n in SCALARS},
             dict(speed.DEPTH_S), speed.HOST_EFF)  # fmt: skip
    _set(values)
    try:
        yield
    finally:
        speed.TYPE_EFFICIENCY.clear()
        speed.TYPE_EFFICIENCY.update(saved[0])
        for n, v in saved[1].items():
            setattr(speed, n, v)
        speed.DEPTH_S.update(saved[2])
        speed.HOST_EFF = saved[3]


def seconds(row: Row) -> float:
    """Measured seconds per token (per MTP cycle for MTP rows)."""
    return expected_tokens(row.alpha, row.k) / row.measured


def features(row: Row) -> list[float]:
    """The row's predicted seconds with each constant alone at 1."""
    n = len(names())
    out = []
    for i in range(n):
        with constants([1.0 if j == i else 0.0 for j in range(n)]):
            out.append(expected_tokens(row.alpha, row.k) / predict(row))
    return out


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Non-negative least squares (active set by elimination; small problems)."""
    act = list(range(a.shape[1]))
    while True:
        c, *_ = np.linalg.lstsq(a[:, act], b, rcond=None)
        if (c >= 0).all():
            out = np.zeros(a.shape[1])
            out[act] = c
            return out
        act.pop(int(np.argmin(c)))


def fit() -> list[float]:
    """The constants fitted on the rows not held out."""
    fit_rows = [r for r in rows() if not held_out(r)]
    a = np.array([features(r) for r in fit_rows])
    y = np.array([seconds(r) for r in fit_rows])
    return [float(v) for v in nnls(a / y[:, None], np.ones_like(y))]


def report(values: list[float], pick: Callable[[Row], bool]) -> list[float]:
    """Relative errors (predicted / measured - 1) of the rows ``pick`` selects."""
    with constants(values):
        return [predict(r) / r.measured - 1 for r in rows() if pick(r)]


def main() -> None:
    """Fit, print the constants and the errors."""
    values = fit()
    for name, v in zip(names(), values, strict=False):
        shown = f"eff {1 / v:.3f}" if name.startswith("1/") and v > 0 else f"{v:.4g}"
        print(f"{name:>16}: {shown}")
    for label, pick in (("fitted", lambda r: not held_out(r)), ("held out", held_out)):
        e = np.abs(report(values, pick))
        print(f"{label}: n={len(e)} median {np.median(e):.1%} p90 {np.percentile(e, 90):.1%}")


if __name__ == "__main__":
    main()
