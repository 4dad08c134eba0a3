"""Cron expressions: parsing, apscheduler fields, systemd OnCalendar, crontab and unit text."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from apscheduler.triggers.cron import CronTrigger

from crawler.base.errors import ConfigError
from crawler.crawl.cron import crontab_text, parse_cron, systemd_units


def test_nightly_default() -> None:
    spec = parse_cron("0 3 * * *")
    assert (spec.minute, spec.hour, spec.day, spec.month, spec.weekday) == (
        (0,),
        (3,),
        None,
        None,
        None,
    )
    assert spec.systemd_calendar() == "*-*-* 03:00:00"
    assert spec.systemd_calendar("Europe/Berlin") == "*-*-* 03:00:00 Europe/Berlin"
    assert spec.apscheduler_fields() == {
        "minute": "0",
        "hour": "3",
        "day": "*",
        "month": "*",
        "day_of_week": "*",
    }


@pytest.mark.parametrize(
    ("expr", "weekday", "calendar"),
    [
        ("30 2 * * 0", (0,), "Sun *-*-* 02:30:00"),
        ("30 2 * * 7", (0,), "Sun *-*-* 02:30:00"),
        ("30 2 * * 1-5", (1, 2, 3, 4, 5), "Mon,Tue,Wed,Thu,Fri *-*-* 02:30:00"),
        ("30 2 * * sat,sun", (0, 6), "Sun,Sat *-*-* 02:30:00"),
        ("30 2 * * */2", (0, 2, 4, 6), "Sun,Tue,Thu,Sat *-*-* 02:30:00"),
        ("@weekly", (0,), "Sun *-*-* 00:00:00"),
    ],
)
def test_weekdays_follow_cron_not_apscheduler_numbering(
    expr: str, weekday: tuple[int, ...], calendar: str
) -> None:
    spec = parse_cron(expr)
    assert spec.weekday == weekday
    assert spec.systemd_calendar() == calendar


def test_apscheduler_trigger_fires_on_the_cron_sunday() -> None:
    # 2026-12-02 is a Wednesday; cron "0 3 * * 0" means Sunday 2026-12-06 03:00.
    spec = parse_cron("0 3 * * 0")
    trigger = CronTrigger(timezone="UTC", **spec.apscheduler_fields())
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    fire = trigger.get_next_fire_time(None, now)
    assert fire == datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
    assert fire.strftime("%A") == "Sunday"


def test_steps_lists_and_macros() -> None:
    spec = parse_cron("*/15 0-6/3 1,15 jan-mar *")
    assert spec.minute == (0, 15, 30, 45)
    assert spec.hour == (0, 3, 6)
    assert spec.day == (1, 15)
    assert spec.month == (1, 2, 3)
    assert spec.systemd_calendar() == "*-01,02,03-01,15 00,03,06:00,15,30,45:00"
    assert parse_cron("@daily").systemd_calendar() == "*-*-* 00:00:00"
    assert parse_cron("5/20 * * * *").minute == (5, 25, 45)
    assert parse_cron("0-59 * * * 0-6").minute is None
    assert parse_cron("  0   3 * * * ").expression == "0 3 * * *"


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("0 3 * *", "5 fields"),
        ("60 3 * * *", "outside 0-59"),
        ("0 24 * * *", "outside 0-23"),
        ("0 3 0 * *", "outside 1-31"),
        ("0 3 * 13 *", "outside 1-12"),
        ("0 3 * * 8", "outside 0-7"),
        ("0 3 * * mon-sun-x", "not a number"),
        ("0 5-3 * * *", "backwards"),
        ("x 3 * * *", "not a number"),
        ("*/0 3 * * *", "outside"),
        ("0 3 1 * 1", "both day of month and day of week"),
        ("0 3 L * *", "not a number"),
    ],
)
def test_invalid_expressions(expr: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_cron(expr)


def test_crontab_text_escapes_percent_and_quotes() -> None:
    text = crontab_text(
        parse_cron("0 3 * * *"),
        ["/opt/q uants/bin/quants", "crawl", "--search", "100%"],
        log_file="/home/u/.local/share/quants/crawl.log",
        environment={"QUANTS_DB": "sqlite:////tmp/c.sqlite"},
        timezone="Europe/Berlin",
    )
    lines = text.splitlines()
    assert lines[1] == "CRON_TZ=Europe/Berlin"
    assert lines[2] == "QUANTS_DB=sqlite:////tmp/c.sqlite"
    assert lines[3] == (
        "0 3 * * * '/opt/q uants/bin/quants' crawl --search 100\\% "
        ">> /home/u/.local/share/quants/crawl.log 2>&1"
    )


def test_systemd_units_text() -> None:
    text = systemd_units(
        parse_cron("0 3 * * 1-5"),
        ["/usr/bin/quants", "crawl", "--search", "a b$%"],
        environment={"QUANTS_DB": "sqlite:////x y/c.sqlite"},
        timezone="UTC",
        jitter_s=600,
    )
    assert "Type=oneshot\n" in text
    assert 'ExecStart=/usr/bin/quants crawl --search "a b$$%%"\n' in text
    assert 'Environment="QUANTS_DB=sqlite:////x y/c.sqlite"\n' in text
    assert "OnCalendar=Mon,Tue,Wed,Thu,Fri *-*-* 03:00:00 UTC\n" in text
    assert "RandomizedDelaySec=600\n" in text
    assert "Persistent=true\n" in text
    assert "HF_TOKEN=" not in text.replace("# HF_TOKEN=... goes", "")
    assert text.count("[Unit]") == 2 and "WantedBy=timers.target" in text
