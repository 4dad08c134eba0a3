"""``quants serve`` in a real browser: Debian's headless Chromium driven by Playwright.

Loads the search page, submits a search, checks the rows, follows a quant to its memory chart,
copies a command with the copy button and reads it back from the clipboard; hostile Hub names
show as text (no element, no script, no dialog). A screenshot of each page is saved under
``$QUANTS_ARTIFACT_DIR/serve-screenshots`` (default: pytest's tmp dir; the path is printed);
with ``QUANTS_UPDATE_SCREENSHOTS=1`` the three main pages also go to docs/img/ for the README.
Skipped when /usr/bin/chromium is absent, except under CI=true, where that is a failure.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.web.conftest import NAME_HTML, Served

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser(served: Served, tmp_path_factory):
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but /usr/bin/chromium is missing: .ci/run installs it")
        pytest.skip("no /usr/bin/chromium (apt-get install chromium) for the browser test")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1280, "height": 860},
            permissions=["clipboard-read", "clipboard-write"],
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    base = os.environ.get("QUANTS_ARTIFACT_DIR")
    where = Path(base) if base else tmp_path_factory.mktemp("artifacts")
    out = where / "serve-screenshots"
    out.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {out}")
    return out


def _shoot(page, shots: Path, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}.png"))
    if os.environ.get("QUANTS_UPDATE_SCREENSHOTS") == "1" and name in ("search", "model", "quant"):
        page.screenshot(path=str(ROOT / "docs" / "img" / f"serve-{name}.png"))


def test_search_rows_chart_and_copied_command(served: Served, browser, shots: Path) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(served.base)
    page.fill("input[name=vram]", "24")
    page.fill("input[name=ctx]", "262144")
    page.fill("input[name=q]", "qwen3.6 27b")
    # The cache selects default to "auto" (the least lossy cache that reaches the context).
    assert page.locator("select[name=cache_type_k]").input_value() == ""
    page.click("form#search button[type=submit]")
    page.wait_for_selector("table#results")
    rows = page.locator("tr.result")
    assert rows.count() >= 2
    first = rows.nth(0).locator("a.quant").inner_text()
    assert "Qwen3.6-27B" in first
    assert "fit" in page.inner_text("#summary")
    _shoot(page, shots, "search")

    # The copy button puts the row's llama-server command on the clipboard.
    button = page.locator("button.copy").first
    expected = button.get_attribute("data-copy")
    assert expected and expected.startswith("llama-server ")
    button.click()
    page.wait_for_selector("button.copy[data-copied]")
    assert button.inner_text() == "copied"
    assert page.evaluate("navigator.clipboard.readText()") == expected

    # The quant page: the memory chart with its budget line and a curve per cache type.
    rows.nth(0).locator("a.quant").click()
    page.wait_for_selector("figure#memory svg")
    assert page.locator("figure#memory path.curve").count() >= 2
    assert page.locator("figure#memory line.budget").count() == 1
    assert page.locator("figure#memory circle.maxctx").count() >= 1
    assert page.locator("figure#layers rect.cell").count() > 10
    assert "device memory (GiB)" in page.inner_text("figure#memory")
    page.locator("figure#memory").scroll_into_view_if_needed()
    _shoot(page, shots, "quant")

    page.click("text=Qwen/Qwen3.6-27B")
    page.wait_for_selector("figure#scatter svg")
    assert page.locator("figure#heatmap rect.cell").count() > 5
    assert page.locator("figure#scatter circle.front").count() >= 1
    _shoot(page, shots, "model")

    page.click("nav >> text=scans")
    page.wait_for_selector("table#scans")
    assert page.locator("table#scans tbody tr").count() >= 1
    _shoot(page, shots, "scans")
    assert dialogs == []


def test_hostile_names_are_text_in_the_dom(served: Served, browser, shots: Path) -> None:
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(served.base + "?vram=24&ctx=4096&limit=50&q=" + quote("Hostile-Text"))
    page.wait_for_selector("table#results")
    links = page.locator("tr.result span.file").all_inner_texts()
    # Markup in a file name is text: the literal characters, and no element made of it.
    assert any("<script>alert(1)</script><img src=x onerror=alert(2)>" in t for t in links)
    assert page.locator("main img").count() == 0
    assert page.locator("script").count() == 1  # copy.js only
    # Terminal controls and the bidi override are shown as escapes, never raw.
    assert any(r"\x1b]0;owned\x07[bold]x[/bold]\u202eevil-Q4_K_M.gguf" in t for t in links)
    text = page.inner_text("main")
    assert "\x1b" not in text and "\u202e" not in text
    # The copy button carries the command as the CLI prints it: the file name shell-quoted,
    # markup as is; a name with terminal controls gets no command at all (no shell line can
    # carry it), so nothing of it reaches the clipboard.
    copies = page.locator("button.copy").evaluate_all("bs => bs.map(b => b.dataset.copy)")
    assert any(shlex.quote(NAME_HTML) in c for c in copies)
    assert not any("evil-Q4_K_M.gguf" in c for c in copies)
    assert not any("\x1b" in c or "\u202e" in c for c in copies)
    _shoot(page, shots, "hostile")
    page.wait_for_timeout(200)
    assert dialogs == []
