"""The template of a generation: a worker process's start, done once, then forked per child.

The supervisor starts one template per generation as a new interpreter (``runjobs`` with a
hidden option), as it would start a worker process: Django is set up, the project's ``jobs``
modules and the engine are imported. The template then closes every database connection, runs
no thread and no job, and waits on its end of a socket pair for the supervisor's requests. For
each, it forks: the new process is a worker process of that generation, started in a few
milliseconds instead of an interpreter's second. SIGHUP and ``--reload`` start a new template,
so a new generation still runs freshly imported code.

What crosses the fork: the imported modules and Django's settings, the logging set-up, the
standard streams, and the two pipes the request carried (the worker process's report to the
supervisor and its gate, ``engine.child``). What does not: a database connection or any other
socket (the template checks before each fork, ``fork_problems``, and refuses when one is open),
a thread, the template's own socket pair and wakeup pipe (closed in the child first thing).

The protocol, one short line per message. From the supervisor: ``F <slot> <scheduler 0|1>``,
with the write end of the child's report pipe and the read end of its gate passed along
(``SCM_RIGHTS``); one request at a time, so the descriptors cannot be taken for another
request's. From the template:

- ``T <pid>``: set up, nothing open; it forks from now on;
- ``N <why>``: it will not fork (a thread or a socket is open after the imports): the
  supervisor starts this generation's worker processes as new interpreters instead;
- ``P <slot> <pid>``: it forked the worker process of that slot;
- ``X <pid> <code>``: that worker process exited (``code`` as ``Popen.returncode``: negative
  for a signal). The template reaps its children (they are not the supervisor's): a zombie
  never outlives the next SIGCHLD here.

The template exits once the supervisor has shut its side of the socket (a new generation, or
stopping) and the last of its children has exited. On Linux it gets SIGTERM when the supervisor
dies (``PR_SET_PDEATHSIG``), and its children get SIGTERM when it dies, so a supervisor killed
with SIGKILL leaves no process behind: each worker process finishes its jobs and exits.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from django.db import connections

from .child import _terminate_with_parent
from .interrupts import START_SIGNALS, signals_held

#: How many descriptors one request may carry: two (its report pipe, its gate); more are closed.
MAX_FDS = 2


def fork_problems(keep: set[int]) -> list[str]:
    """What would cross a fork and must not: another thread (only the forking thread is
    copied, holding whatever locks the others held), an open database connection, a socket
    other than the descriptors in ``keep`` and the standard streams (a journal's socket)."""
    problems = []
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread()]
    if others:
        problems.append(f"threads are running ({', '.join(others)})")
    open_aliases = [
        conn.alias for conn in connections.all(initialized_only=True) if conn.connection is not None
    ]
    if open_aliases:
        problems.append(f"database connections are open ({', '.join(open_aliases)})")
    sockets = [fd for fd in _socket_fds() if fd > 2 and fd not in keep]
    if sockets:
        problems.append(f"sockets are open (descriptors {', '.join(map(str, sockets))})")
    return problems


def _socket_fds() -> list[int]:
    """This process's descriptors that are sockets (Linux: ``/proc/self/fd``; elsewhere none
    can be listed cheaply, and none is reported)."""
    found = []
    try:
        entries = list(Path("/proc/self/fd").iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            if os.readlink(entry).startswith("socket:"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue  # the descriptor of the listing itself, closed by now
    return sorted(found)


def serve(
    control_fd: int,
    start_child: Callable[[int, int | None, bool], int],
    prepare: Callable[[], None] = lambda: None,
) -> int:
    """Run the template on ``control_fd`` (its end of the socket pair) until the supervisor
    shuts it and its children have exited. ``prepare()`` does once, before the first fork, what
    each worker process would do on first use (lazy imports, the database driver's); then every
    connection is closed. ``start_child(report_fd, gate_fd, scheduler)`` runs one worker process
    in the forked child and returns its exit code."""
    _terminate_with_parent()  # the supervisor killed with SIGKILL: this process goes too
    control = socket.socket(fileno=control_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, _wake)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    # A Ctrl-C, a SIGHUP or a SIGUSR1 sent to the whole process group are the supervisor's
    # and its workers' business; SIGTERM ends this process (it runs no job).
    for signum in START_SIGNALS - {signal.SIGTERM}:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Started with START_SIGNALS blocked (``signals_held``), as a worker process is.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    prepare()
    connections.close_all()  # what preparing or the imports opened
    keep = {control_fd}
    problems = fork_problems(keep)
    if problems:
        _say(control, f"N {'; '.join(problems)}")
        return 0
    # What the imports built is shared by every child, page for page, until written: moved
    # out of the collector's reach, the children's collections neither scan it nor copy it.
    gc.collect()
    gc.freeze()
    _say(control, f"T {os.getpid()}")
    children: set[int] = set()
    accepting = True
    while accepting or children:
        watched = [control_fd, wake_r] if accepting else [wake_r]
        try:
            ready, _, _ = select.select(watched, [], [], 1.0)
        except InterruptedError:
            ready = []
        if wake_r in ready:
            _drain(wake_r)
        for pid, code in _reaped(children):
            _say(control, f"X {pid} {code}")
        if accepting and control_fd in ready:
            try:
                message, fds, _, _ = socket.recv_fds(control, 256, MAX_FDS + 1)
            except ConnectionError:
                message, fds = b"", []
            if not message:
                accepting = False  # the supervisor is done with this generation
            for fd in fds[MAX_FDS:]:
                os.close(fd)
            if not message or not fds:
                continue
            report_fd, gate_fd = fds[0], (fds[1] if len(fds) > 1 else None)
            try:
                words = message.decode().split()
                slot, scheduler = int(words[1]), words[2] == "1"
                problems = fork_problems({*keep, *fds[:MAX_FDS]})
                if problems:
                    _say(control, f"N {'; '.join(problems)}")
                    continue
                pid = _fork(
                    report_fd,
                    gate_fd,
                    scheduler,
                    start_child,
                    close_in_child=(control_fd, wake_r, wake_w),
                )
                children.add(pid)
                _say(control, f"P {slot} {pid}")
            except (OSError, ValueError, IndexError) as exc:
                _say(control, f"N could not fork: {exc}")
            finally:
                for fd in fds[:MAX_FDS]:
                    os.close(fd)
    return 0


def _fork(
    report_fd: int,
    gate_fd: int | None,
    scheduler: bool,
    start_child: Callable[[int, int | None, bool], int],
    close_in_child: tuple[int, ...],
) -> int:
    """Fork one worker process. It starts with ``START_SIGNALS`` blocked: the worker unblocks
    them once its handlers are installed, so a signal sent while it starts waits for them."""
    with signals_held():
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in close_in_child:
                os.close(fd)
            code = start_child(report_fd, gate_fd, scheduler)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            # Never back into the template's loop, nor its ``atexit``: this is a worker process.
            os._exit(code)
    raise AssertionError("unreachable")  # pragma: no cover


def _reaped(children: set[int]) -> list[tuple[int, int]]:
    """The children that exited since the last look, with their codes."""
    reaped = []
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        children.discard(pid)
        reaped.append((pid, os.waitstatus_to_exitcode(status)))
    return reaped


def _say(control: socket.socket, line: str) -> None:
    try:
        control.sendall(line.encode(errors="replace") + b"\n")
    except OSError:
        pass  # the supervisor is gone: this process gets SIGTERM, or its socket's EOF


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _wake(signum: int, frame: object) -> None:
    """SIGCHLD's handler: nothing (the wakeup pipe woke the loop, which reaps)."""
