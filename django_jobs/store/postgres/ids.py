"""Job ids drawn ahead from the job table's sequence (``JobIds``), and the statements that
draw them."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

from ..base.columns import TABLE


class JobIds:
    """Job ids drawn ahead from the table's sequence, kept per database alias for this process.

    Why the ids are drawn before the insert: the insert also writes each job's ``job.created``
    row, whose text (``serialize.event_text``, the one encoder of the job JSON) holds the
    job's id. Ids drawn by the insert statement itself could not be in a text made before it.
    So each insert that stores ``job.created`` draws, besides the rows it inserts, the ids of
    the next ones (``ahead``): an enqueue stays one round trip. A process's first enqueue, one
    after more than ``MAX_AGE`` seconds without any, and a batch larger than what is in hand
    draw theirs with a statement of their own first. An insert that stores no event (inside
    the caller's transaction, or live events off) draws its ids itself, as before.

    Weighed against the other way (the insert draws the ids and returns them; a second,
    batched statement writes the event rows from them): that is two round trips, two
    transactions in autocommit, and a ``job.started`` could be stored before its
    ``job.created``. Drawn ahead, the ids of one process increase but interleave with other
    processes' by up to ``MAX_AGE``: "newest first" lists follow creation to within that.
    Ids are never reused: a sequence never gives one twice, and those a process drew but did
    not use leave gaps, as rolled-back inserts always did. The cache is per process (a forked
    child starts without the parent's ids) and shared by its threads, which take its ids in
    increasing order even when two of them drew at once (``add``).
    """

    #: Ids in hand older than this are dropped: they would sort before newer jobs of others.
    MAX_AGE = 2.0
    #: Ids kept in hand at the least (a few threads enqueuing at once draw no more often).
    MIN_AHEAD = 8
    #: Ids an insert draws ahead at the most (a larger batch draws its own first).
    MAX_AHEAD = 1000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # alias -> the ids in hand, in order, each with when it was drawn
        self._held: dict[str, deque[tuple[float, int]]] = {}

    def _in_hand(self, alias: str) -> deque[tuple[float, int]]:
        if self._pid != os.getpid():  # forked: the parent's ids are the parent's
            self._pid, self._held = os.getpid(), {}
        return self._held.setdefault(alias, deque())

    def take(self, alias: str, n: int) -> tuple[list[int] | None, int]:
        """``n`` ids in hand, or None when there are too few; and how many to draw ahead."""
        with self._lock:
            held = self._in_hand(alias)
            too_old = self.clock() - self.MAX_AGE
            while held and held[0][0] < too_old:
                held.popleft()
            taken = [held.popleft()[1] for _ in range(n)] if len(held) >= n else None
            wanted = min(max(n, self.MIN_AHEAD), self.MAX_AHEAD)
            return taken, max(0, wanted - len(held))

    def add(self, alias: str, ids: list[int]) -> None:
        """Keep ``ids``, drawn just now, in hand."""
        with self._lock:
            now = self.clock()
            held, drawn = self._in_hand(alias), sorted(ids)
            if held and drawn and drawn[0] < held[-1][1]:
                # Threads that drew at the same moment kept their ids in another order than
                # the sequence gave them. Merged, so that ids are still taken in increasing
                # order (a batch's job.created rows are stored in id order), each stamped as
                # old as the oldest in hand: none is kept past MAX_AGE.
                now = held[0][0]
                drawn = sorted([job_id for _, job_id in held] + drawn)
                held.clear()
            held.extend((now, job_id) for job_id in drawn)

    def held(self, alias: str) -> list[int]:
        """The ids in hand for ``alias`` (the next inserts take them in this order)."""
        with self._lock:
            return [job_id for _, job_id in self._in_hand(alias)]

    def forget(self) -> None:
        """Drop every id in hand: for a sequence restarted under this process (``TRUNCATE ...
        RESTART IDENTITY``, as the benchmark empties the table), whose ids would come again."""
        with self._lock:
            self._held.clear()


job_ids = JobIds()

#: The job table's next id, and a statement that draws ``%s`` of them.
NEXT_ID = f"nextval((SELECT pg_get_serial_sequence('{TABLE}', 'id'))::regclass)"
DRAW_IDS = f"SELECT {NEXT_ID} FROM generate_series(1, %s)"
