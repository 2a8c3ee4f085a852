"""Per-type flow control: concurrency and a token-bucket rate, as plain values (CONTRACT.md,
Flow control). Shared by the config check, the request check and the store; imports nothing.
"""
from __future__ import annotations

import dataclasses
import re

PERIODS = {"s": 1, "min": 60, "h": 3600}     # a rate's period, in seconds
RATE_PATTERN = r"^([1-9][0-9]{0,8})/(s|min|h)$"
MAX_CONCURRENCY = 1_000_000
MAX_BURST = 1_000_000_000
FIELDS = ("concurrency", "rate", "burst")
_RATE = re.compile(RATE_PATTERN)


def parse_rate(rate: str) -> tuple[int, int]:
    """``"10/s"`` as (10, 1): tokens per period and the period in seconds; ValueError if bad."""
    found = _RATE.match(rate) if isinstance(rate, str) else None
    if found is None:
        raise ValueError(f"{rate!r} is not a rate: write N/s, N/min or N/h with N >= 1")
    return int(found.group(1)), PERIODS[found.group(2)]


@dataclasses.dataclass(frozen=True)
class Limits:
    """The limits of one type; None where there is none. ``burst`` None means "N"."""

    concurrency: int | None = None
    rate: str | None = None
    burst: int | None = None

    def __post_init__(self) -> None:
        if self.rate is not None:
            parse_rate(self.rate)
        if self.burst is not None and self.rate is None:
            raise ValueError("burst needs a rate")

    @property
    def any(self) -> bool:
        """True when the type has a limit at all."""
        return self.concurrency is not None or self.rate is not None

    def bucket(self) -> tuple[float, float] | None:
        """(size, tokens per second) of the rate's bucket; None without a rate."""
        if self.rate is None:
            return None
        n, period = parse_rate(self.rate)
        return float(self.burst if self.burst is not None else n), n / period

    def shown_burst(self) -> int | None:
        """The burst in force (N when left to its default), None without a rate."""
        bucket = self.bucket()
        return None if bucket is None else int(bucket[0])

    def changed(self, fields: dict[str, object]) -> "Limits":
        """These limits with ``fields`` replaced (None removes one); a rate removed takes its
        burst with it."""
        merged = {**dataclasses.asdict(self), **fields}
        if merged["rate"] is None and fields.get("burst") is None:
            merged["burst"] = None  # a burst given without a rate is refused below
        return Limits(**merged)  # type: ignore[arg-type]


NONE = Limits()


def from_options(opts: dict[str, object]) -> Limits:
    """The limits a ``JOB_TYPES`` entry sets; ValueError naming what is wrong."""
    concurrency, rate, burst = (opts.get(f) for f in FIELDS)
    for name, value, hi in (("concurrency", concurrency, MAX_CONCURRENCY),
                            ("burst", burst, MAX_BURST)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= hi):
            raise ValueError(f"{name} must be a whole number from 1 to {hi}, not {value!r}")
    if rate is not None and not isinstance(rate, str):
        raise ValueError(f"rate must be a string such as '10/s', not {rate!r}")
    return Limits(concurrency, rate, burst)  # type: ignore[arg-type]
