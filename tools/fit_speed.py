"""Fit crawler/ranking/speed.py's constants on the fitting rows of the decode-speed fixture.

``python tools/fit_speed.py`` prints the constants (paste them into crawler/ranking/speed.py)
and the errors on fitting and held-out rows; ``--published`` fits the per-platform terms of
other GPUs on the published rows (tests/fixtures/llamacpp/speed-published.jsonl) instead (the
MTP share on the MTP rows, the other terms on the rest). The
model is linear in its constants once each type's efficiency is written as its reciprocal, so
the fit is a non-negative least squares on seconds per token (or per MTP cycle), each row
weighted by its own time (relative errors). The features are read off the model itself: every
constant at zero but one.

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
from tests.fixtures.llamacpp.speed import (
    PublishedRow,
    Row,
    depth_fit,
    held_out,
    predict,
    predict_published,
    published_mtp_pairs,
    published_rows,
    rows,
)

TYPES = ("Q3_K", "IQ3_XXS", "IQ4_XS", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q8_0")
#: Fitted scalars. Tried and left out of the model: a cost per layer or per token (with four
#: architectures collinear with the weight bytes: the fit drove efficiencies above 1), per
#: attention layer (fitted to 0), a verify cost per drafted token apart from the draft cost
#: (both scale with k), a cost per host MoE layer (one fitting row has experts on host) and a
#: cost per cycle with a rejected draft (fitted to 1 us).
SCALARS = ("MOE_LAYER_S", "QCACHE_LAYER_S", "SERVER_S",
           "DRAFT_S", "ACCEPT_S", "VERIFY_S")  # fmt: skip
DEPTHS = ("vec", "quant")
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
    cap = speed.PLATFORM_EFFICIENCY["cuda"]
    # the H200's weight reads are kernel-bound: the bandwidth cap of other GPUs must not clip
    # the features (a type's rate at 1 / value) while fitting. An f16 cache's read at that share
    # goes too: the fit gives the tensor-core kernel's rows (both Qwen3.6 files at 8K and 32K)
    # no depth cost, which on the H200 is 1-5 % of their time (within their run-to-run spread)
    speed.PLATFORM_EFFICIENCY["cuda"] = 1e6
    _set(values)
    try:
        yield
    finally:
        speed.PLATFORM_EFFICIENCY["cuda"] = cap
        speed.TYPE_EFFICIENCY.clear()
        speed.TYPE_EFFICIENCY.update(saved[0])
        for n, v in saved[1].items():
            setattr(speed, n, v)
        speed.DEPTH_S.update(saved[2])
        speed.HOST_EFF = saved[3]


def seconds(row: Row) -> float:
    """Measured seconds per token (per MTP cycle for MTP rows)."""
    return expected_tokens(row.alpha, row.k) / row.measured


def _predicted_seconds(row: Row, values: list[float]) -> float:
    with constants(values):
        return expected_tokens(row.alpha, row.k) / predict(row)


def offset(row: Row) -> float:
    """The row's predicted seconds with every constant at 0: what no constant scales (another
    GPU's cache read at its bandwidth over the H200's)."""
    return _predicted_seconds(row, [0.0] * len(names()))


def features(row: Row) -> list[float]:
    """The row's predicted seconds with each constant alone at 1, less its offset."""
    n, base = len(names()), offset(row)
    return [_predicted_seconds(row, [float(j == i) for j in range(n)]) - base for i in range(n)]


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
    """The H200's constants, fitted on its rows not held out and the other GPU's deep rows
    without MTP (depth_fit: the H100 has the H200's compute, and attention over a long cache is
    bound by compute)."""
    fit_rows = [r for r in rows() if not held_out(r) and not (depth_fit(r) and r.k > 0)]
    a = np.array([features(r) for r in fit_rows])
    y = np.array([seconds(r) for r in fit_rows])
    b = y - np.array([offset(r) for r in fit_rows])
    return [float(v) for v in nnls(a / y[:, None], b / y)]


@contextmanager
def draft_depth(layers: float) -> Iterator[None]:
    """The model with this DRAFT_DEPTH_LAYERS, restored afterwards."""
    saved = speed.DRAFT_DEPTH_LAYERS
    speed.DRAFT_DEPTH_LAYERS = layers
    try:
        yield
    finally:
        speed.DRAFT_DEPTH_LAYERS = saved


def fit_depth(values: list[float]) -> float:
    """DRAFT_DEPTH_LAYERS on the depth_fit rows (the other GPU's MTP rows at depth), with the
    H200's constants ``values``: linear least squares of the relative errors."""
    mtp = [r for r in rows() if depth_fit(r) and r.k > 0]
    with constants(values):
        with draft_depth(0.0):
            base = np.array([seconds(r) * r.measured / predict(r) for r in mtp])
        with draft_depth(1.0):
            per_layer = np.array([seconds(r) * r.measured / predict(r) for r in mtp]) - base
    y = np.array([seconds(r) for r in mtp])
    f = per_layer / y
    return float(np.dot(f, 1.0 - base / y) / np.dot(f, f))


def report(values: list[float], pick: Callable[[Row], bool]) -> list[float]:
    """Relative errors (predicted / measured - 1) of the rows ``pick`` selects."""
    with constants(values):
        return [predict(r) / r.measured - 1 for r in rows() if pick(r)]


def _set_platform(p: str, eff: float, layer_s: float, moe_s: float) -> None:
    speed.PLATFORM_EFFICIENCY[p] = eff
    speed.PLATFORM_LAYER_S[p] = layer_s
    speed.PLATFORM_MOE_LAYER_S[p] = moe_s


def fit_platform(p: str) -> tuple[float, float, float, float]:
    """The platform's efficiency, layer and MoE-layer seconds fitted on its published rows not
    held out, and the fit's sum of squared relative errors: a grid over the efficiency (0.30 to
    1.00 by 0.01), non-negative least squares for the two fixed costs at each. Without a MoE
    row the MoE layer cost stays the H200's (MOE_LAYER_S)."""
    fit_rows = [r for r in published_rows() if r.platform == p and not r.held_out and not r.k]
    moe = any(r.x.n_moe_layers for r in fit_rows)
    y = np.array([r.measured for r in fit_rows])
    a = np.array([[r.x.n_layer, r.x.n_moe_layers] for r in fit_rows], float)[:, : 2 if moe else 1]
    best: tuple[float, float, float, float] | None = None
    for eff in np.arange(0.30, 1.0001, 0.01):
        _set_platform(p, float(eff), 0.0, 0.0)
        base = np.array([1.0 / predict_published(r) for r in fit_rows])
        c = nnls(a * y[:, None], 1.0 - base * y)
        sse = float((((base + a @ c) * y - 1.0) ** 2).sum())
        if best is None or sse < best[3]:
            best = (float(eff), float(c[0]), float(c[1]) if moe else speed.MOE_LAYER_S, sse)
    assert best is not None
    _set_platform(p, *best[:3])
    return best


def fit_mtp_share(p: str) -> float | None:
    """The platform's MTP share (speed.PLATFORM_MTP_SHARE) fitted on its MTP rows not held out:
    a grid (0.05 to 10 by 0.01) over the squared speed-up error, each row against its own
    MTP-off row, the platform's other terms as fitted. None (the share unchanged) without one."""
    pairs = [(r, b) for r, b in published_mtp_pairs() if r.platform == p and not r.held_out]
    if not pairs:
        return None

    def sse(share: float) -> float:
        speed.PLATFORM_MTP_SHARE[p] = share
        return sum((predict_published(r) / predict_published(b) - r.measured / b.measured) ** 2
                   for r, b in pairs)  # fmt: skip

    best = min((round(float(v), 2) for v in np.arange(0.05, 10.0001, 0.01)), key=sse)
    speed.PLATFORM_MTP_SHARE[p] = best
    return best


def report_published(pick: Callable[[PublishedRow], bool]) -> list[float]:
    """Relative errors of the published rows ``pick`` selects (the constants as set)."""
    return [predict_published(r) / r.measured - 1 for r in published_rows() if pick(r)]


def main_published() -> None:
    """Fit the per-platform terms, print them and the errors."""
    for p in ("cuda", "metal"):
        eff, layer_s, moe_s, sse = fit_platform(p)
        n = sum(1 for r in published_rows() if r.platform == p and not r.held_out)
        share = fit_mtp_share(p)
        print(f"{p}: eff {eff:.2f} layer {layer_s:.4g} s moe layer {moe_s:.4g} s "
              f"sse {sse:.4f} MTP share {share} ({n} rows)")  # fmt: skip
    picks: tuple[tuple[str, Callable[[PublishedRow], bool]], ...] = (
        ("fitted (MTP-off)", lambda r: not r.held_out and not r.k),
        ("held out", lambda r: r.held_out),
    )
    for label, pick in picks:
        e = np.abs(report_published(pick))
        print(f"{label}: n={len(e)} median {np.median(e):.1%} p90 {np.percentile(e, 90):.1%}")


def main() -> None:
    """Fit, print the constants and the errors."""
    if "--published" in sys.argv[1:]:
        main_published()
        return
    values = fit()
    for name, v in zip(names(), values, strict=False):
        shown = f"eff {1 / v:.3f}" if name.startswith("1/") and v > 0 else f"{v:.4g}"
        print(f"{name:>16}: {shown}")
    layers = fit_depth(values)
    print(f"DRAFT_DEPTH_LAYERS: {layers:.3f}")
    with draft_depth(layers):
        for label, pick in (("fitted", lambda r: not held_out(r)), ("held out", held_out)):
            e = np.abs(report(values, pick))
            print(f"{label}: n={len(e)} median {np.median(e):.1%} p90 {np.percentile(e, 90):.1%}")


if __name__ == "__main__":
    main()
