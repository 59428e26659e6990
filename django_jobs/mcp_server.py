"""``manage.py jobs mcp``: the queue's introspection as Model Context Protocol tools, on stdio.

Built on the official MCP SDK's high-level server (``mcp.server.mcpserver.MCPServer``, the
``mcp`` extra). Every tool returns, as its text, the JSON document that the matching
``manage.py jobs ... --json`` command prints, made by the same functions:

====================  =====================================================
tool                  same JSON as
====================  =====================================================
``inspect_queues``    ``jobs stats --json`` (``GET stats/``)
``inspect_job``       ``jobs inspect ID --json``
``list_jobs``         ``jobs list [--state S] [--kind K] [--queue Q] --json``
``dead_letters``      ``jobs list --state failed --json``
``kinds``             ``jobs kinds --json``
``explain_claim``     (no command) the claim statement of an engine and queue,
                      its parameters and the database's plan for it
``retry``             ``jobs retry ID [--from-step NAME] [--children] --json``
``cancel``            ``jobs cancel ID --json``
``wake``              ``jobs wake --json``
====================  =====================================================

The server is read-only unless started with ``--allow-actions``: without it, ``retry``,
``cancel`` and ``wake`` are not served at all (not listed, and a call is refused as an
unknown tool). An error of the engine (no such job, a state that refuses the action) is a tool
error whose text starts with the error's code, e.g. ``JOB_NOT_FOUND: No job has id 7.``
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connections

from . import __version__, cli, operations
from .exceptions import JobsError
from .observability.stats import queue_stats

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

INSTALL_HINT = (
    "`manage.py jobs mcp` needs the official MCP SDK, which is not installed: "
    'pip install "django-durable-jobs[mcp]" (or pip install mcp), then run it again.'
)
INSTRUCTIONS = (
    "Introspection of a django_jobs queue: counts per queue and state (inspect_queues), jobs "
    "(list_jobs, inspect_job with its steps and log), dead letters, the registered kinds, and "
    "the exact SQL a worker claims with and its plan (explain_claim), for a stuck queue."
)


class McpMissing(JobsError, ImportError):
    """The ``mcp`` package (the ``mcp`` extra) is not installed."""

    code = "MCP_MISSING"


def build_server(*, allow_actions: bool = False) -> MCPServer:
    """The MCP server with the read tools, and the action tools when ``allow_actions``."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp_types import ToolAnnotations  # the SDK's protocol types (a dependency of mcp)
    except ImportError as exc:
        raise McpMissing(INSTALL_HINT) from exc

    server = MCPServer(
        "django-jobs", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    acting = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    for fn in READ_TOOLS:
        server.add_tool(_as_tool(fn), annotations=read_only, structured_output=False)
    if allow_actions:
        for fn in ACTION_TOOLS:
            server.add_tool(_as_tool(fn), annotations=acting, structured_output=False)
    return server


def serve(*, allow_actions: bool = False) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    build_server(allow_actions=allow_actions).run("stdio")


def _as_tool(fn: Callable[..., Any]) -> Callable[..., str]:
    """``fn``, returning the JSON text ``--json`` prints; engine errors become tool errors.

    The SDK runs a synchronous tool on a worker thread: the database connection that thread
    opened is closed when the call ends, as at the end of a request.
    """
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def tool(*args: Any, **kwargs: Any) -> str:
        try:
            return cli.json_text(fn(*args, **kwargs))
        except JobsError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from exc
        finally:
            connections.close_all()

    return tool


# --- the read tools --------------------------------------------------------------------------


def inspect_queues() -> dict[str, Any]:
    """Counts per queue and state, the oldest due job's age per queue, and pickup latency
    percentiles: what `manage.py jobs stats --json` prints."""
    return queue_stats()


def inspect_job(job_id: int) -> dict[str, Any]:
    """One job: its row, its durable steps (name, state, attempts, times, error) and its log
    tail: what `manage.py jobs inspect ID --json` prints."""
    return operations.inspect_job(job_id)


def list_jobs(
    state: str | None = None,
    kind: str | None = None,
    queue: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """The newest jobs first, filtered by state (queued, running, waiting, succeeded, failed,
    blocked, unknown, cancelled), kind and queue: what `manage.py jobs list --json` prints."""
    return cli.job_rows(state=state, kind=kind, queue=queue, limit=limit)


def dead_letters(limit: int = 100) -> list[dict[str, Any]]:
    """Failed jobs (retries spent), newest first: what `manage.py jobs list --state failed
    --json` prints."""
    return operations.dead_letters(limit=limit)


def kinds() -> list[dict[str, Any]]:
    """Every registered kind with its queue, engine, retry policy, timeout and input schema:
    what `manage.py jobs kinds --json` prints."""
    return operations.describe_kinds()


def explain_claim(engine: str = "default", queue: str | None = None) -> dict[str, Any]:
    """The SQL statement a worker of this engine (on this queue, or all queues) claims due
    jobs with, its parameters, how many jobs of the engine are due, and the database's plan
    for the statement (EXPLAIN; SQLite: EXPLAIN QUERY PLAN). Nothing is claimed."""
    return operations.explain_claim(engine=engine, queue=queue)


# --- the action tools (--allow-actions) ------------------------------------------------------


def retry(job_id: int, from_step: str | None = None, children: bool = False) -> dict[str, Any]:
    """Queue a failed, blocked or cancelled job again; from_step also forgets that step and the
    ones after it so they run again; children also retries its failed and cancelled children
    (down the tree) and the job waits for them: what `manage.py jobs retry ID --json` prints."""
    return operations.retry(job_id, from_step=from_step, children=children)


def cancel(job_id: int) -> dict[str, Any]:
    """Cancel a job (a running one stops at its next check): what `manage.py jobs cancel ID
    --json` prints."""
    return operations.cancel(job_id)


def wake() -> dict[str, Any]:
    """Re-ask every waiting job now: what `manage.py jobs wake --json` prints."""
    return cli.wake()


READ_TOOLS = (inspect_queues, inspect_job, list_jobs, dead_letters, kinds, explain_claim)
ACTION_TOOLS = (retry, cancel, wake)
