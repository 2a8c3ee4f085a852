"""The dashboard's throughput chart: geometry for a server-rendered SVG, no JavaScript."""
from __future__ import annotations

import dataclasses

from queuelog.model.jobs import to_datetime
from queuelog.server.store import Series

WIDTH = 1100       # viewBox units; the stylesheet scales the SVG to its box
HEIGHT = 150
# A phone's copy of the chart: the whole hour in a box about 340 px wide, at a height and a
# text size that stay readable (the wide one squeezed there would be 46 px tall).
NARROW_WIDTH = 400
NARROW_HEIGHT = 190
LEFT = 40          # room for the y-axis labels
BOTTOM = 20        # room for the x-axis labels
TOP = 8
GAP = 2            # between bars


@dataclasses.dataclass(frozen=True)
class Bar:
    """One minute: a stacked bar, completed below failed."""

    x: float
    width: float
    completed_y: float
    completed_h: float
    failed_y: float
    failed_h: float
    title: str


@dataclasses.dataclass(frozen=True)
class Tick:
    """An axis label and where it goes."""

    x: float
    y: float
    text: str


@dataclasses.dataclass(frozen=True)
class Chart:
    """Everything the template needs to draw the chart."""

    width: int
    height: int
    bars: list[Bar]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    plot_left: int
    plot_right: int
    completed: int
    failed: int


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^n that is at least ``value`` (and at least 1)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= value:
                return m * step
        step *= 10


def _hhmm(us: int) -> str:
    return to_datetime(us).strftime("%H:%M")


def minute_chart(series: Series, width: int = WIDTH, height: int = HEIGHT) -> Chart:
    """Lay out one bar per minute, scaled to the busiest minute, in a width x height box."""
    n = len(series.completed)
    top = nice_ceiling(max((c + f for c, f in zip(series.completed, series.failed)),
                           default=0))
    plot_h = height - TOP - BOTTOM
    base = height - BOTTOM
    slot = (width - LEFT) / max(n, 1)
    bars = []
    for i, (done, failed) in enumerate(zip(series.completed, series.failed)):
        done_h = plot_h * done / top
        failed_h = plot_h * failed / top
        minute = series.start + i * series.bucket
        bars.append(Bar(
            x=round(LEFT + i * slot + GAP / 2, 2), width=round(max(slot - GAP, 1), 2),
            completed_y=round(base - done_h, 2), completed_h=round(done_h, 2),
            failed_y=round(base - done_h - failed_h, 2), failed_h=round(failed_h, 2),
            title=f"{_hhmm(minute)} UTC: {done} completed, {failed} failed"))
    # A label every 15 minutes, and one for the current minute at the right edge.
    x_ticks = [Tick(round(LEFT + i * slot, 2), height - 5,
                    _hhmm(series.start + i * series.bucket)) for i in range(0, n, 15)]
    x_ticks.append(Tick(width, height - 5, "now"))
    y_ticks = [Tick(LEFT - 6, round(base - plot_h * frac, 2), f"{int(top * frac):,}")
               for frac in (0, 0.5, 1) if frac == 0 or top * frac == int(top * frac)]
    return Chart(width, height, bars, x_ticks, y_ticks, LEFT, width,
                 sum(series.completed), sum(series.failed))
