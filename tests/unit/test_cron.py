"""Cron expressions and time zones (server/cron.py): the forms, and the DST rules."""
from __future__ import annotations

import datetime as dt

import pytest

from queuelog.model.jobs import from_datetime, isoformat
from queuelog.server import cron

UTC = dt.timezone.utc


def us(*parts: int) -> int:
    """Epoch microseconds of a UTC wall time."""
    return from_datetime(dt.datetime(*parts, tzinfo=UTC))


def ticks(expr: str, zone: str, start: int, end: int) -> list[str]:
    """Every tick in (start, end], as ISO text."""
    c, out, t = cron.parse(expr, zone), [], start
    while True:
        t = c.next_after(t)
        if t is None or t > end:
            return out
        out.append(isoformat(t))


def test_five_fields_names_ranges_steps_and_lists():
    # Weekdays by name at 09:00 and 17:30 UTC; 2026-12-04 is a Friday.
    assert ticks("0,30 9 * * mon-fri", "UTC", us(2026, 12, 4, 8), us(2026, 12, 7, 10)) == [
        "2026-12-04T09:00:00.000000Z", "2026-12-04T09:30:00.000000Z",
        "2026-12-07T09:00:00.000000Z", "2026-12-07T09:30:00.000000Z"]
    assert ticks("0 0 1 jan *", "UTC", us(2026, 6, 1), us(2028, 6, 1)) == [
        "2027-01-01T00:00:00.000000Z", "2028-01-01T00:00:00.000000Z"]


def test_six_fields_lead_with_seconds():
    assert ticks("*/10 * * * * *", "UTC", us(2026, 1, 1), us(2026, 1, 1, 0, 0, 30)) == [
        "2026-01-01T00:00:10.000000Z", "2026-01-01T00:00:20.000000Z",
        "2026-01-01T00:00:30.000000Z"]


@pytest.mark.parametrize("macro, first", [
    ("@hourly", "2026-01-01T01:00:00.000000Z"), ("@daily", "2026-01-02T00:00:00.000000Z"),
    ("@weekly", "2026-01-04T00:00:00.000000Z"), ("@monthly", "2026-02-01T00:00:00.000000Z"),
    ("@yearly", "2027-01-01T00:00:00.000000Z")])
def test_macros(macro, first):
    assert isoformat(cron.parse(macro).next_after(us(2026, 1, 1))) == first


def test_a_time_zone_moves_the_tick():
    # 03:00 in Berlin is 02:00 UTC in winter and 01:00 UTC in summer.
    assert ticks("0 3 * * *", "Europe/Berlin", us(2026, 1, 10, 12), us(2026, 1, 11, 12)) == [
        "2026-01-11T02:00:00.000000Z"]
    assert ticks("0 3 * * *", "Europe/Berlin", us(2026, 7, 10, 12), us(2026, 7, 11, 12)) == [
        "2026-07-11T01:00:00.000000Z"]


def test_spring_gap_a_missing_wall_time_fires_once_at_the_end_of_the_gap():
    # 2026-03-29: Berlin's clocks go from 02:00 CET to 03:00 CEST (01:00 UTC); 02:30 never is.
    assert ticks("30 2 * * *", "Europe/Berlin", us(2026, 3, 28, 12), us(2026, 3, 30, 12)) == [
        "2026-03-29T01:00:00.000000Z", "2026-03-30T00:30:00.000000Z"]
    # Every quarter hour: 02:00-02:45 do not exist; they and 03:00 are one tick at 03:00 CEST.
    assert ticks("*/15 * * * *", "Europe/Berlin", us(2026, 3, 29, 0, 30),
                 us(2026, 3, 29, 1, 30)) == [
        "2026-03-29T00:45:00.000000Z", "2026-03-29T01:00:00.000000Z",
        "2026-03-29T01:15:00.000000Z", "2026-03-29T01:30:00.000000Z"]


def test_autumn_fold_a_repeated_wall_time_fires_once_the_first_time():
    # 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:00-02:59 happen twice.
    assert ticks("30 2 * * *", "Europe/Berlin", us(2026, 10, 24, 12), us(2026, 10, 26, 12)) == [
        "2026-10-25T00:30:00.000000Z", "2026-10-26T01:30:00.000000Z"]
    got = ticks("*/30 * * * *", "Europe/Berlin", us(2026, 10, 24, 23, 45),
                us(2026, 10, 25, 2, 45))
    assert got == ["2026-10-25T00:00:00.000000Z", "2026-10-25T00:30:00.000000Z",
                   # 02:00 and 02:30 CET (01:00, 01:30 UTC) repeat wall times: no ticks
                   "2026-10-25T02:00:00.000000Z", "2026-10-25T02:30:00.000000Z"]


def test_the_newest_tick_at_or_before_now_in_the_fold():
    c = cron.parse("*/15 * * * *", "Europe/Berlin")
    # 01:40 UTC is 02:40 CET, the second pass: the newest tick was 02:45 CEST (00:45 UTC).
    assert isoformat(c.latest_at_or_before(us(2026, 10, 25, 1, 40))) == \
        "2026-10-25T00:45:00.000000Z"
    assert c.latest_at_or_before(us(2026, 10, 25, 0, 45)) == us(2026, 10, 25, 0, 45)


@pytest.mark.parametrize("expr, zone, says", [
    ("* * * *", "UTC", "4 fields"), ("* * * * * * *", "UTC", "7 fields"),
    ("61 * * * *", "UTC", "not valid"), ("* * * * funday", "UTC", "not valid"),
    ("@reboot", "UTC", "macros"), ("", "UTC", "non-empty"), (5, "UTC", "non-empty"),
    ("* * * * *", "Mars/Olympus", "IANA"), ("* * * * *", "../../etc/passwd", "IANA"),
    ("* * * * *", "", "IANA"), ("0 0 30 2 *", "UTC", "never fires"),
    ("0 0 31 4,6 *", "UTC", "never fires"), ("* * * 31 2 *", "Europe/Berlin", "never fires")])
def test_bad_expressions_and_zones_say_what_is_wrong(expr, zone, says):
    with pytest.raises(ValueError, match=says):
        cron.parse(expr, zone)


def test_the_newest_tick_takes_one_step_even_in_a_fold(monkeypatch):
    # An every-second catch_up schedule walked 20,000 wall times back at each process's first
    # look: seconds of CPU, and no tick of any schedule made meanwhile (found by the
    # schedules e2e test on a loaded box: ticks 5-7 s late). Near a DST change the walk
    # stayed, until the second pass of a fold was worked out without one.
    c = cron.parse("* * * * * *", "Europe/Berlin")
    steps = []
    real = cron.croniter.get_prev
    monkeypatch.setattr(cron.croniter, "get_prev",
                        lambda self, *a, **k: steps.append(1) or real(self, *a, **k))
    for now, newest in [
            (us(2026, 12, 3, 12, 0, 7) + 250_000, us(2026, 12, 3, 12, 0, 7)),
            # 02:40 CET, the second pass: 02:59:59 CEST (00:59:59 UTC) came before it
            (us(2026, 10, 25, 1, 40), us(2026, 10, 25, 0, 59, 59)),
            # 02:40 CEST, the first pass: just now
            (us(2026, 10, 25, 0, 40), us(2026, 10, 25, 0, 40)),
            # 03:00:00.5 CEST, just after the spring gap
            (us(2026, 3, 29, 1, 0, 0) + 500_000, us(2026, 3, 29, 1, 0, 0))]:
        steps.clear()
        assert c.latest_at_or_before(now) == newest
        assert len(steps) == 1


def _newest_by_walking(c: cron.Cron, now: int, hours: int) -> int | None:
    """The newest tick at or before ``now``: every wall time from ``hours`` before now's to
    three hours after it, each made an instant, the newest not after now kept."""
    start = cron._at(now - hours * 3600 * 1_000_000).astimezone(c.zone).replace(tzinfo=None)
    stop = start + dt.timedelta(hours=hours + 3)
    walls = cron.croniter(c.expr, start, second_at_beginning=True)
    newest = None
    while (wall := walls.get_next(dt.datetime)) <= stop:
        t = c.instant(wall)
        if t <= now and (newest is None or t > newest):
            newest = t
    return newest


# Changes: Berlin and New York an hour each way; Lord Howe half an hour (a 30-minute fold).
CHANGES = [us(2026, 3, 29, 1), us(2026, 10, 25, 1), us(2026, 3, 8, 7), us(2026, 11, 1, 6),
           us(2026, 4, 4, 15), us(2026, 10, 3, 15, 30)]


@pytest.mark.parametrize("expr, zone, hours", [
    ("*/15 * * * *", "Europe/Berlin", 4), ("30 2 * * *", "Europe/Berlin", 80),
    ("*/7 * * * *", "America/New_York", 4), ("30 1 * * *", "America/New_York", 80),
    ("15 */5 * * * *", "Australia/Lord_Howe", 4), ("0 9 * * mon-fri", "UTC", 80)])
def test_one_step_agrees_with_walking_forward_around_dst_changes(expr, zone, hours):
    c = cron.parse(expr, zone)
    # From two hours before each change to three after, every 17 min 13.5 s, on whole
    # seconds and between them: before, in and after gaps and both passes of folds.
    nows = [change + k * 1_033_500_000 + extra for change in CHANGES for k in range(-7, 11)
            for extra in (0, 1)]
    assert [c.latest_at_or_before(t) for t in nows] == [
        _newest_by_walking(c, t, hours) for t in nows]


def test_a_leap_day_expression_is_valid_and_fires_on_leap_days():
    # "never fires" is an impossible date, not a rare one: Feb 29 comes every four years.
    c = cron.parse("0 0 29 2 *")
    assert isoformat(c.next_after(us(2026, 1, 1))) == "2028-02-29T00:00:00.000000Z"
    assert c.latest_at_or_before(us(2026, 1, 1)) == us(2024, 2, 29)

