"""Decode speed: crawler/ranking/speed.py's prediction against every measured H200 row.

Reads ``tests/fixtures/llamacpp/speed-measurements.jsonl`` (made by ``tools/measure_speed.py``
on an H200 with llama.cpp 0c1e57098) and prints Markdown: one row per measurement (predicted,
measured, error, fitted or held out), then the median and 90th-percentile absolute error of the
fitted and the held-out rows, and the MTP speed-up errors at known acceptances; then the same for
the published rows of other GPUs (``speed-published.jsonl``, one source per row), their MTP
speed-ups and their slowdowns at depth.
``python -m bench bench_speed``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1) + 0.5)]


def main(options: Sequence[str] = ()) -> None:
    """Print the tables."""
    del options
    from tests.fixtures.llamacpp.speed import held_out, mtp_pairs, predict, rows

    print("| row | measured tok/s | predicted | error | set |")
    print("|---|---:|---:|---:|---|")
    errs: dict[str, list[float]] = {"fitted": [], "held out": []}
    for r in rows():
        p = predict(r)
        e = p / r.measured - 1
        kind = "held out" if held_out(r) else "fitted"
        errs[kind].append(abs(e))
        print(f"| {r.label} | {r.measured:.1f} | {p:.1f} | {e:+.1%} | {kind} |")
    print()
    print("| set | rows | median abs error | p90 abs error |")
    print("|---|---:|---:|---:|")
    for kind, xs in errs.items():
        print(f"| {kind} | {len(xs)} | {statistics.median(xs):.1%} | {_p90(xs):.1%} |")
    print()
    print("| MTP row (held out) | measured speed-up | predicted | error (points) |")
    print("|---|---:|---:|---:|")
    for r, b in mtp_pairs():
        m, p = r.measured / b.measured, predict(r) / predict(b)
        print(f"| {r.label} | {m:.2f}x | {p:.2f}x | {(p - m) * 100:+.0f} |")
    _published()


def _published() -> None:
    from tests.fixtures.llamacpp.speed import (
        predict_published,
        published_depth_pairs,
        published_mtp_pairs,
        published_rows,
    )

    print()
    print("| published row (GPU, file) | published tok/s | predicted | error | set | source |")
    print("|---|---:|---:|---:|---|---|")
    # fitted MTP rows fit the platform's MTP share by their speed-up (the table below)
    errs: dict[str, list[float]] = {"fitted": [], "fitted (MTP share)": [], "held out": []}
    for r in published_rows():
        p = predict_published(r)
        e = p / r.measured - 1
        kind = "held out" if r.held_out else "fitted (MTP share)" if r.k else "fitted"
        errs[kind].append(abs(e))
        src = r.raw["source"].removeprefix("https://")
        print(f"| {r.label} | {r.measured:.1f} | {p:.1f} | {e:+.1%} | {kind} | {src} |")
    print()
    print("| published set | rows | median abs error | p90 abs error |")
    print("|---|---:|---:|---:|")
    for kind, xs in errs.items():
        print(f"| {kind} | {len(xs)} | {statistics.median(xs):.1%} | {_p90(xs):.1%} |")
    print()
    print("| published MTP row | measured speed-up | predicted | error (points) | set |")
    print("|---|---:|---:|---:|---|")
    for r, b in published_mtp_pairs():
        m, p = r.measured / b.measured, predict_published(r) / predict_published(b)
        kind = "held out" if r.held_out else "fitted"
        print(f"| {r.label} a{r.alpha:.3g} | {m:.2f}x | {p:.2f}x | {(p - m) * 100:+.0f} | {kind} |")
    print()
    print(
        "| published row at depth (held out) | measured / shallowest | predicted | error (points) |"
    )
    print("|---|---:|---:|---:|")
    for r, b in published_depth_pairs():
        m, p = r.measured / b.measured, predict_published(r) / predict_published(b)
        print(f"| {r.label} / d{b.depth} | {m:.3f} | {p:.3f} | {(p - m) * 100:+.1f} |")


if __name__ == "__main__":
    main()
