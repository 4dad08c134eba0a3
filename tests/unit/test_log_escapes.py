"""Log lines quote repo ids and file names from the Hub or a snapshot: they reach the terminal
escaped, through configured handlers and logging's last-resort handler alike."""

from __future__ import annotations

import logging

import pytest

from crawler.crawl.logs import ControlFilter, escape_unconfigured_logs

HOSTILE = "evil/x\x1b]0;owned\x07\u202e-GGUF"


def test_last_resort_handler_escapes(capsys: pytest.CaptureFixture[str]) -> None:
    escape_unconfigured_logs()
    logger = logging.getLogger("quants-test-unconfigured")
    logger.propagate = False  # no handler anywhere: logging's last resort prints it
    logger.warning("cannot reprofile %s/%s", HOSTILE, "a.gguf")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err
    assert r"evil/x\x1b]0;owned\x07\u202e-GGUF/a.gguf" in err


def test_filter_keeps_newlines_and_escapes_controls() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s\nnext", (HOSTILE,), None)
    assert ControlFilter().filter(record)
    assert record.getMessage() == r"evil/x\x1b]0;owned\x07\u202e-GGUF" + "\nnext"
