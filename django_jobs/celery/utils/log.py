"""``celery.utils.log``: ``get_task_logger(__name__)`` and ``get_logger``, as Celery's.

A task logger is the module's logger with ``celery.task`` as its parent (when it had none but
the root), so a project's ``LOGGING`` for ``celery.task`` reaches every task module's
messages, as it does under Celery.
"""

from __future__ import annotations

import logging

task_logger = logging.getLogger("celery.task")


def get_logger(name: str | logging.Logger) -> logging.Logger:
    """The logger of ``name``, as ``logging.getLogger``."""
    return name if isinstance(name, logging.Logger) else logging.getLogger(name)


def get_task_logger(name: str) -> logging.Logger:
    """The logger for a task module: ``celery.task`` is its parent."""
    if name in ("celery.task", "celery"):
        raise RuntimeError(f"logger name {name!r} is reserved for Celery's own loggers.")
    logger = get_logger(name)
    if logger.parent is logging.root:
        logger.parent = task_logger
    return logger


__all__ = ["get_logger", "get_task_logger", "task_logger"]
