"""Terminal safety of CLI output, token redaction in logs, and refused repo paths."""

from __future__ import annotations

import io
import logging
import os
import pty

import pytest

from crawler.cli._output import print_csv, safe_text
from crawler.crawl.logs import SecretFilter, redact_logs
from crawler.hub.client import is_safe_repo_path


def test_safe_text_escapes_controls_and_keeps_markup_literal():
    assert safe_text("\x1b[31mred\x07 [bold]x[/bold]") == "\\x1b[31mred\\x07 [bold]x[/bold]"
    assert safe_text("a\tb\nc") == "a b c"
    assert safe_text("\x9b2J") == "\\x9b2J"


def test_csv_is_raw_in_a_pipe_and_escaped_on_a_terminal():
    buf = io.StringIO()
    print_csv(["x"], [["\x1b[31mred"]], out=buf)
    assert buf.getvalue() == "x\n\x1b[31mred\n"
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as term:
        print_csv(["x"], [["\x1b[31mred"]], out=term)
    assert os.read(master, 100) == b"x\r\n\\x1b[31mred\r\n"
    os.close(master)


def test_secret_filter_redacts_messages_and_args():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("test.redact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        redact_logs("hf_secret123")
        redact_logs("hf_secret123")  # idempotent
        assert sum(isinstance(f, SecretFilter) for f in handler.filters) == 1
        logger.propagate = False
        logger.info("header X-Error-Message: token %s rejected", "hf_secret123")
    finally:
        root.removeHandler(handler)
        logger.removeHandler(handler)
    assert stream.getvalue() == "header X-Error-Message: token hf_*** rejected\n"


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("model-Q4_K_M.gguf", True),
        ("UD-Q4_K_XL/model-00001-of-00002.gguf", True),
        ("sub/../../x.gguf", False),
        ("./x.gguf", False),
        ("/etc/passwd", False),
        ("a//b.gguf", False),
        ("a\\..\\b.gguf", False),
        ("a\x1b[31m.gguf", True),
        ("", False),
    ],
)
def test_repo_paths_with_dot_segments_are_refused(path, ok):
    assert is_safe_repo_path(path) is ok
