"""A transaction of another connection that stays open: what a worker cut off from the
server, or a ``retry()`` in progress, leaves holding its locks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction


class _RolledBack(Exception):
    pass


@contextmanager
def held_open(hold: Callable[[], Any]) -> Iterator[None]:
    """Run ``hold()`` in a transaction on a thread of its own (its own connection); the block
    runs while that transaction is open, which is then rolled back. What ``hold`` raises is
    raised here."""
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                hold()
                holding.set()
                release.wait(30)
                raise _RolledBack
        except _RolledBack:
            pass
        except BaseException as exc:
            errors.append(exc)
        finally:
            holding.set()
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(30)
        if errors:
            raise errors[0]
        yield
    finally:
        release.set()
        thread.join(30)


def on_another_connection(fn: Callable[[], Any], timeout: float = 10) -> Any:
    """``fn()`` on a thread of its own, its connection closed after; fails the test, rather
    than hanging it, when ``fn`` takes longer than ``timeout`` (waits on a lock)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            result.append(fn())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still waiting after {timeout}s"
    if errors:
        raise errors[0]
    return result[0]
