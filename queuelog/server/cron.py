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
# 3600 steps; a valid expression that matches nothing (Feb 30) stops here, not forever.
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

    def latest_at_or_before(self, now_us: int) -> int | None:
        """The newest tick at or before ``now_us`` (catch_up's one missed tick)."""
        wall = self._wall(now_us).replace(microsecond=0)
        if self._steady(now_us):
            # One UTC offset from SHIFT before now to SHIFT after: now is in no fold, so no
            # wall time later than now's is an earlier instant, and a wall time's first
            # occurrence never decreases as the wall time grows. The newest tick is the
            # newest wall time at or before now's: one step back. (The walk below took
            # 20,000 steps for an every-second schedule, seconds of CPU at every start.)
            walls = croniter(self.expr, wall + _SECOND, second_at_beginning=True)
            return self.instant(walls.get_prev(dt.datetime))
        # Walked back from SHIFT after now's wall time to SHIFT before it: in a fold, a wall
        # time later than now's can be an earlier instant (the first pass), and the newest.
        walls = croniter(self.expr, wall + SHIFT, second_at_beginning=True)
        best: int | None = None
        for _ in range(MAX_STEPS):
            earlier = walls.get_prev(dt.datetime)
            tick = self.instant(earlier)
            if tick <= now_us and (best is None or tick > best):
                best = tick
            if best is not None and earlier < wall - SHIFT:
                return best
        return best

    def _steady(self, us: int) -> bool:
        """Whether this zone keeps one UTC offset from SHIFT before ``us`` to SHIFT after
        (its offset changes months apart, never twice within 2 * SHIFT)."""
        offsets = {_at(t).astimezone(self.zone).utcoffset()
                   for t in (us - _SHIFT_US, us, us + _SHIFT_US)}
        return len(offsets) == 1

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
        lo, hi = min(a, b) // 1_000_000, max(a, b) // 1_000_000
        after = _at(hi * 1_000_000).astimezone(self.zone).utcoffset()
        while lo < hi:
            mid = (lo + hi) // 2
            if _at(mid * 1_000_000).astimezone(self.zone).utcoffset() == after:
                hi = mid
            else:
                lo = mid + 1
        return lo * 1_000_000


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
            croniter(text, dt.datetime(2026, 1, 1), second_at_beginning=True)
        except (CroniterError, ValueError, KeyError, IndexError) as exc:
            raise ValueError(f"cron {expr!r} is not valid: {exc}") from None
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
