"""Cron expressions in an IANA time zone: the ticks of a schedule, with the contract's DST rules.

croniter does the field arithmetic on *naive wall-clock* times, so each wall time comes up
exactly once whatever the zone does; this module alone maps a wall time to an instant:

- a wall time that occurs twice (the autumn fold) is its first occurrence (``fold=0``), and
  the second pass of the repeated hour makes no ticks of its own;
- a wall time that does not exist (the spring gap) fires at the first instant after the
  gap (every wall time inside one gap lands on that same instant: one tick).

croniter's own time-zone handling is not used: across a DST change it has skipped and
repeated ticks between releases; the naive walk has nothing to get wrong.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

MACROS = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly")
# Wall times looked at for one tick: an every-second schedule crosses a one-hour fold in
# 3600 steps. (An expression that matches no day, Feb 30, is refused by ``parse``.)
MAX_STEPS = 20_000
_UTC = dt.timezone.utc
SHIFT = dt.timedelta(hours=3)  # more than any zone's DST change (2 h at most)
_SHIFT_US = SHIFT // dt.timedelta(microseconds=1)
_SECOND = dt.timedelta(seconds=1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)


def _us(when: dt.datetime) -> int:
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _at(us: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(microseconds=us)


@dataclasses.dataclass(frozen=True)
class Cron:
    """A checked cron expression in a time zone; ticks are epoch microseconds."""

    expr: str
    zone: ZoneInfo

    def next_after(self, after_us: int) -> int | None:
        """The first tick strictly after ``after_us`` (None if none within MAX_STEPS)."""
        walls = croniter(self.expr, self._wall(after_us), second_at_beginning=True)
        for _ in range(MAX_STEPS):
            tick = self.instant(walls.get_next(dt.datetime))
            if tick > after_us:
                return tick
        return None

    def latest_at_or_before(self, now_us: int) -> int:
        """The newest tick at or before ``now_us`` (catch_up's one missed tick): one step.

        ``instant`` never decreases as the wall time grows (a gap's wall times share its
        end; a fold's fire on the first pass, before the wall times after the fold). So
        the newest tick is the newest wall time at or before the last wall time whose
        instant is not after now: now's own, or, in the second pass of a fold, the last
        second before the fold ends (those wall times all came in the first pass).
        (A walk back over six hours of wall times, kept for DST, took 20,000 steps for an
        every-second schedule: seconds of CPU at a start.)
        """
        local = _at(now_us).astimezone(self.zone)
        if local.fold:  # the second pass: the wall clock has shown later times already
            change = self._change_between(now_us - _SHIFT_US, now_us)
            end = self._wall(change - 1_000_000) + _SECOND  # the wall time the fold ends at
        else:
            end = local.replace(tzinfo=None, microsecond=0) + _SECOND
        walls = croniter(self.expr, end, second_at_beginning=True)
        return self.instant(walls.get_prev(dt.datetime))

    def _change_between(self, lo_us: int, hi_us: int) -> int:
        """The first whole second (epoch us) with ``hi_us``'s UTC offset, after ``lo_us``
        (one offset change between them)."""
        lo, hi = lo_us // 1_000_000, -(-hi_us // 1_000_000)
        after = _at(hi * 1_000_000).astimezone(self.zone).utcoffset()
        while lo < hi:
            mid = (lo + hi) // 2
            if _at(mid * 1_000_000).astimezone(self.zone).utcoffset() == after:
                hi = mid
            else:
                lo = mid + 1
        return lo * 1_000_000

    def _wall(self, us: int) -> dt.datetime:
        """The naive wall-clock time of an instant in this zone."""
        return _at(us).astimezone(self.zone).replace(tzinfo=None)

    def instant(self, wall: dt.datetime) -> int:
        """The instant a wall time fires at: its first occurrence, or the gap's end."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        if first.astimezone(_UTC).astimezone(self.zone).replace(tzinfo=None) == wall:
            return _us(first)
        # In a gap: fold=0 and fold=1 read it with the offsets before and after the change,
        # and the change itself lies between the two instants. Find its first second.
        a, b = _us(first), _us(wall.replace(tzinfo=self.zone, fold=1))
        return self._change_between(min(a, b), max(a, b))


def parse(expr: object, timezone: object = "UTC") -> Cron:
    """A Cron from the contract's forms; ValueError saying what is wrong otherwise."""
    if not isinstance(expr, str) or not expr.strip():
        raise ValueError(f"cron must be a non-empty string, not {expr!r}")
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text not in MACROS:
            raise ValueError(f"cron {expr!r}: the macros are {', '.join(MACROS)}")
    elif len(text.split()) not in (5, 6):
        raise ValueError(f"cron {expr!r} has {len(text.split())} fields; five (minute hour "
                         "day month weekday) or six with leading seconds")
    else:
        try:
            walls = croniter(text, dt.datetime(2026, 1, 1), second_at_beginning=True)
        except (CroniterError, ValueError, KeyError, IndexError) as exc:
            raise ValueError(f"cron {expr!r} is not valid: {exc}") from None
        try:  # fields each valid, together impossible (Feb 30): every later look would raise
            walls.get_next(dt.datetime)
        except CroniterError:
            raise ValueError(f"cron {expr!r} never fires (no such day)") from None
    return Cron(text, zone(timezone))


def zone(name: object) -> ZoneInfo:
    """The IANA zone ``name``; ValueError if there is none of that name."""
    if not isinstance(name, str) or not name or name.startswith("/") or ".." in name:
        raise ValueError(f"timezone {name!r} is not an IANA time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"timezone {name!r} is not an IANA time zone name "
                         "(e.g. Europe/Berlin, UTC)") from None
