"""When the next delayed job comes due: the long poll times its next look by it."""
from __future__ import annotations

import functools
from typing import Any, Sequence

from sqlalchemy import bindparam, select

from queuelog.model.jobs import Status
from queuelog.server.store.reads import status_is
from queuelog.server.store.part import Part
from queuelog.server.store.tables import jobs


@functools.lru_cache(maxsize=16)
def _next_statement(n_types: int) -> Any:
    """Per type, the first pending run_at after ``:now``: one seek each in the
    (type, run_at) index of pending jobs, so it stays cheap however many jobs wait."""
    return select(*[
        select(jobs.c.run_at).where(status_is(Status.PENDING), jobs.c.type == bindparam(f"t{i}"),
                                    jobs.c.run_at > bindparam("now"))
        .order_by(jobs.c.run_at).limit(1).scalar_subquery().label(f"next_{i}")
        for i in range(n_types)])


class Due(Part):
    """The next-due read."""


    def next_due_in(self, types: Sequence[str]) -> float | None:
        """Seconds until the earliest pending job of ``types`` not yet due comes due."""
        if not types:
            return None
        now = self.clock()
        params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(types)}
        with self._read.connect() as conn:
            row = conn.execute(_next_statement(len(types)), {**params, "now": now}).one()
        found = [at for at in row if at is not None]
        return None if not found else (min(found) - now) / 1_000_000
