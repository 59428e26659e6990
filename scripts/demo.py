"""The demo: the test project on SQLite, a worker and the web page, started together.

Run it through ``scripts/demo``, which creates the virtual environment first::

    ./scripts/demo [--host 127.0.0.1] [--port 8000]
    ./scripts/demo --smoke [--timeout 120]

The demo migrates the database, creates two users, enqueues a few ``demo.render`` and
``demo.hello`` jobs and a ``demo.publish`` workflow (a parent job that spawns a render per size
and gathers them), then runs ``manage.py runjobs`` and ``manage.py runserver`` (ASGI, through
daphne) until Ctrl-C. The users are the two roles of the app:

- ``demo`` (password ``demo``), a member: the page at ``/`` shows their own jobs, live;
- ``ops`` (password ``ops``), an operator (the ``django_jobs.operate_jobs`` permission): the
  admin's queue overview at ``/admin/django_jobs/job/overview/`` and every job's page, with its
  steps trace, log and the retry and cancel actions.

``--smoke`` checks the same path end to end on a throw-away SQLite file and a free port: it
starts the worker and the web server, signs in as the demo user, submits one job through the
page's endpoint (and a body it refuses with a 400), polls ``/demo/jobs.json`` until the job has
succeeded, checks that a member gets the admin's operators-only page, then signs in as the
operator and loads the admin's queue overview, the kinds (the demo's only) and that job's
admin page (its steps and log).
It stops both processes with SIGTERM and exits 0; anything else exits 1 with what went wrong
and the processes' logs.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MANAGE = str(ROOT / "manage.py")
DEMO_USER = "demo"
DEMO_PASSWORD = "demo"
OPS_USER = "ops"
OPS_PASSWORD = "ops"
OVERVIEW_PATH = "/admin/django_jobs/job/overview/"
# (video, frames): about 0.15 s a frame, so the progress bars move for a while after start.
DEMO_VIDEOS = [("intro", 80), ("trailer", 160), ("credits", 240)]
# A ``demo.publish`` workflow: one ``demo.render`` child per size (frames), then gathered.
DEMO_WORKFLOW_VIDEO = "launch"
DEMO_SIZES = [20, 40, 60]
#: The demo's settings: the test project's without the test suite's job kinds.
SETTINGS = "testproject.demo_settings"


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


def say(message: str) -> None:
    print(f"demo: {message}", flush=True)


# --- processes -------------------------------------------------------------------------------


class Process:
    """A ``manage.py`` child whose output goes to a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log_path = log
        self.signalled = False
        self._log = open(log, "wb")  # closed in stop()
        self.popen = subprocess.Popen(
            [sys.executable, MANAGE, *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us; we stop the children in order
        )

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        text = self.output().rstrip().splitlines()[-lines:]
        body = "\n".join(f"    {line}" for line in text) or "    (no output)"
        return f"--- last lines of {self.name} ({self.log_path}) ---\n{body}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self) -> None:
        """Send SIGTERM: the worker finishes its running jobs, the server closes. A second
        call sends a second SIGTERM, on which the worker exits at once."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            self.signalled = True

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (unless sent already), wait ``timeout`` seconds for a clean exit, SIGKILL."""
        if not self.signalled:
            self.terminate()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            say(f"{self.name} did not stop within {timeout:.0f}s of SIGTERM; killing it")
            self.popen.kill()
            self.popen.wait()
        self._log.close()
        return self.popen.returncode


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def wait_for(
    predicate: Any, timeout: float, what: str, procs: list[Process], interval: float = 0.1
) -> Any:
    """Poll ``predicate`` until truthy; fail early if a process died, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        for proc in procs:
            if not proc.alive():
                raise DemoError(
                    f"{proc.name} exited (code {proc.popen.returncode}) while waiting for "
                    f"{what}.\n{proc.tail()}"
                )
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}.")
        time.sleep(interval)


def accepts_connections(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# --- database set-up -------------------------------------------------------------------------


def prepare_database(enqueue_demo_jobs: bool) -> None:
    """Migrate, create the demo users (idempotent) and, for the demo, enqueue a few jobs."""
    import django

    django.setup()
    from django.contrib.auth.models import Permission
    from django.core.management import call_command
    from django.db import connections

    say("migrating the database")
    call_command("migrate", interactive=False, verbosity=0)

    user = ensure_user(DEMO_USER, DEMO_PASSWORD)
    operator = ensure_user(OPS_USER, OPS_PASSWORD)
    operator.user_permissions.add(
        Permission.objects.get(content_type__app_label="django_jobs", codename="operate_jobs")
    )

    if enqueue_demo_jobs:
        for job in enqueue_jobs(user):
            note = " (already queued)" if job.deduped else ""
            say(f"enqueued {job.kind} #{job.pk}{note}")
    connections.close_all()


def enqueue_jobs(user: Any) -> list[Any]:
    """The demo's first jobs, owned by ``user``: renders, a greeting, and a workflow whose
    parent spawns a render per size (its page and its children's pages link to each other)."""
    from testproject.demo.jobs import hello, publish, render

    jobs = [render.as_user(user, {"video": v, "frames": n}) for v, n in DEMO_VIDEOS]
    jobs.append(hello.as_user(user, "demo"))
    jobs.append(publish.as_user(user, {"video": DEMO_WORKFLOW_VIDEO, "sizes": DEMO_SIZES}))
    return jobs


def ensure_user(username: str, password: str) -> Any:
    """The user ``username`` with ``password``, staff: both sign in through the admin's login
    page (LOGIN_URL). Staff alone opens no admin page: only operators see the jobs there."""
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username=username)
    if not user.check_password(password) or not user.is_staff:
        user.set_password(password)
        user.is_staff = True
        user.save()
    return user


# --- HTTP ------------------------------------------------------------------------------------


class Browser:
    """Just enough of a browser: cookies, the admin login form and CSRF headers."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def cookie(self, name: str) -> str:
        for cookie in self.cookies:
            if cookie.name == name:
                return cookie.value or ""
        return ""

    def request(
        self, path: str, data: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        """Return (status, content type, body) of the final response."""
        req = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(req, timeout=10) as response:
                body = response.read().decode(errors="replace")
                return response.status, response.headers.get("Content-Type", ""), body
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            return exc.code, exc.headers.get("Content-Type", ""), body

    def page(self, path: str, *expected: str) -> str:
        """GET the HTML page at ``path``; fail unless it answers 200 with every ``expected``."""
        status, _, body = self.request(path)
        if status != 200:
            raise DemoError(f"GET {path} answered HTTP {status}.")
        missing = [text for text in expected if text not in body]
        if missing:
            raise DemoError(f"GET {path} answered 200 without {missing}.")
        return body

    def login(self, username: str, password: str) -> None:
        status, _, page = self.request("/admin/login/?next=/")
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        if status != 200 or match is None:
            raise DemoError(f"GET /admin/login/ returned {status} without a login form.")
        form = urllib.parse.urlencode(
            {
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": match.group(1),
                "next": "/",
            }
        ).encode()
        status, _, page = self.request(
            "/admin/login/?next=/", form, {"Content-Type": "application/x-www-form-urlencoded"}
        )
        if status != 200:
            raise DemoError(f"signing in as {username!r} answered HTTP {status}.")
        # Signed in: the demo's JSON endpoint answers instead of redirecting to the login page.
        status, _ = self.json("/demo/jobs.json")
        if status != 200:
            raise DemoError(f"signed in as {username!r}, /demo/jobs.json answered HTTP {status}.")

    def json(self, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers.update(
                {"Content-Type": "application/json", "X-CSRFToken": self.cookie("csrftoken")}
            )
        status, content_type, text = self.request(path, data, headers)
        if "json" not in content_type:
            raise DemoError(f"{path} answered HTTP {status} with {content_type!r}, not JSON.")
        return status, json.loads(text)


# --- modes -----------------------------------------------------------------------------------


def start_processes(env: dict[str, str], host: str, port: int, logs: Path) -> list[Process]:
    logs.mkdir(parents=True, exist_ok=True)
    worker = Process("worker", ["runjobs"], env, logs / "worker.log")
    server = Process(
        "web server", ["runserver", f"{host}:{port}", "--noreload"], env, logs / "server.log"
    )
    procs = [worker, server]
    try:
        wait_for(lambda: "ready" in worker.output(), 60, "the worker to start", procs)
        wait_for(lambda: accepts_connections(host, port), 60, f"the server on port {port}", procs)
    except BaseException:
        stop_all(procs)
        raise
    return procs


def stop_all(procs: list[Process]) -> dict[str, int]:
    """Signal every process at once, then wait for each: they stop side by side."""
    for proc in procs:
        if not proc.signalled:
            proc.terminate()
    return {proc.name: proc.stop() for proc in procs}


def run_demo(args: argparse.Namespace, env: dict[str, str]) -> int:
    if not port_is_free(args.host, args.port):
        raise DemoError(
            f"port {args.port} on {args.host} is in use. Stop what uses it, or pass "
            f"--port {args.port + 1}."
        )
    prepare_database(enqueue_demo_jobs=True)
    logs = ROOT / "artifacts" / "demo"
    procs = start_processes(env, args.host, args.port, logs)
    url = f"http://{args.host}:{args.port}/"
    print(
        f"\n  django_jobs demo is running.\n\n"
        f"  Open     {url}\n"
        f"  Sign in  user {DEMO_USER!r}, password {DEMO_PASSWORD!r}: a member; the page shows\n"
        f"           their own jobs\n"
        f"  Press 'Render a video' to submit more jobs; progress updates live.\n"
        f"\n"
        f"  Admin    {url.rstrip('/')}{OVERVIEW_PATH}  (the queue overview)\n"
        f"  Sign in  user {OPS_USER!r}, password {OPS_PASSWORD!r}: an operator, who sees every\n"
        f"           queue and job, with its steps, log, retry and cancel\n"
        f"\n"
        f"  Logs     {logs / 'worker.log'}, {logs / 'server.log'}\n"
        f"  Stop     Ctrl-C\n",
        flush=True,
    )
    try:
        while all(proc.alive() for proc in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:
        print()
        say(
            "stopping: the worker finishes the jobs it is running first (SIGTERM). "
            "Ctrl-C again to stop at once; unfinished jobs run again after their lease (30 s)."
        )
        try:
            stop_all(procs)
        except KeyboardInterrupt:
            for proc in procs:
                proc.terminate()  # a second SIGTERM makes the worker exit at once
            for proc in procs:
                proc.stop()
        return 0
    dead = [proc for proc in procs if not proc.alive()]
    stop_all(procs)
    for proc in dead:
        print(proc.tail(), file=sys.stderr)
    raise DemoError(f"{', '.join(p.name for p in dead)} exited unexpectedly; see the log above.")


def run_smoke(args: argparse.Namespace, env: dict[str, str]) -> int:
    started = time.monotonic()
    prepare_database(enqueue_demo_jobs=False)
    logs = Path(env["DEMO_SMOKE_DIR"])
    procs = start_processes(env, args.host, args.port, logs)
    failure: DemoError | None = None
    try:
        browser = Browser(f"http://{args.host}:{args.port}")
        browser.login(DEMO_USER, DEMO_PASSWORD)
        say(f"signed in as {DEMO_USER!r}")
        video = f"smoke-{uuid.uuid4().hex[:8]}"
        status, job = browser.json("/demo/submit/", {"video": video})
        if status != 201 or job.get("kind") != "demo.render":
            raise DemoError(f"POST /demo/submit/ returned {status}: {job}")
        say(f"submitted {job['kind']} #{job['id']} ({video})")
        status, refused = browser.json("/demo/submit/", ["not", "an object"])
        if status != 400 or refused.get("code") != "INVALID":
            raise DemoError(f"POST /demo/submit/ of a JSON list returned {status}: {refused}")

        def finished() -> dict[str, Any] | None:
            _, data = browser.json("/demo/jobs.json")
            for row in data.get("results", []):
                if row["id"] == job["id"] and row["state"] not in ("queued", "running"):
                    return row
            return None

        final = wait_for(finished, args.timeout, f"job #{job['id']} to end", procs, 0.2)
        if final["state"] != "succeeded":
            raise DemoError(f"job #{job['id']} ended {final['state']}: {final.get('error')}")
        if final["progress"].get("percent") != 100:
            raise DemoError(f"job #{job['id']} succeeded at {final['progress']}, not 100%.")
        say(f"job #{job['id']} succeeded, progress {final['progress']}")
        check_admin(f"http://{args.host}:{args.port}", job["id"], video)
    except DemoError as exc:
        failure = exc
    except Exception as exc:  # an HTTP or socket error: report it with the logs
        failure = DemoError(f"{type(exc).__name__}: {exc}")
    codes = stop_all(procs)
    if failure is None and codes["worker"] != 0:
        failure = DemoError(f"the worker exited {codes['worker']} on SIGTERM instead of 0.")
    if failure is not None:
        for proc in procs:
            print(proc.tail(), file=sys.stderr)
        raise failure
    say(f"smoke test passed in {time.monotonic() - started:.1f}s (stopped: {codes})")
    return 0


def check_admin(base: str, job_id: int, video: str) -> None:
    """Sign in as the operator; load the queue overview and the job's admin page."""
    member = Browser(base)
    member.login(DEMO_USER, DEMO_PASSWORD)
    status, _, refusal = member.request(OVERVIEW_PATH)
    if status != 403 or "Sign in as an operator" not in refusal:
        raise DemoError(
            f"a member opened {OVERVIEW_PATH}: HTTP {status}, not 403 with the admin's page."
        )
    ops = Browser(base)
    ops.login(OPS_USER, OPS_PASSWORD)
    say(f"signed in as {OPS_USER!r}")
    ops.page("/", f'href="{OVERVIEW_PATH}"')
    ops.page(OVERVIEW_PATH, "Queue overview", 'id="djj-queues"', 'data-queue="default"')
    say(f"{OVERVIEW_PATH} shows the queues")
    _, kinds = ops.json("/api/jobs/kinds/")
    # The app's built-in kinds (django.tasks' runner, the canvas flow) are there in any project.
    builtin = ("demo.", "django.tasks", "django_jobs.")
    foreign = [k["kind"] for k in kinds if not k["kind"].startswith(builtin)]
    if foreign:
        raise DemoError(f"the demo registers kinds that are not the demo's: {foreign}")
    page = f"/admin/django_jobs/job/{job_id}/change/"
    ops.page(
        page,
        "demo.render",
        'data-step="probe"',
        'data-step="publish"',
        f"rendering {video}",
        "djj-state-succeeded",
    )
    say(f"{page} shows job #{job_id}'s steps and log")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address of the web server")
    parser.add_argument("--port", type=int, default=None, help="port (default 8000; smoke: free)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="start everything, run one job end to end, stop, exit 0",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="smoke: seconds to wait for the job (default 120)",
    )
    args = parser.parse_args(argv)

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS
    env["PYTHONUNBUFFERED"] = "1"
    tmp: str | None = None
    if args.smoke:
        # A throw-away SQLite file, so the smoke test never touches the demo's own data.
        tmp = tempfile.mkdtemp(prefix="django-jobs-smoke-")
        env.pop("DATABASE_URL", None)
        env["SQLITE_PATH"] = str(Path(tmp) / "smoke.sqlite3")
        env["DEMO_SMOKE_DIR"] = tmp
        env.setdefault("DEMO_FRAME_SECONDS", "0.02")
        args.port = args.port or free_port(args.host)
    else:
        args.port = args.port or 8000
    signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM too
    os.environ.update(env)
    if "DATABASE_URL" not in env:
        os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    try:
        code = run_smoke(args, env) if args.smoke else run_demo(args, env)
    except DemoError as exc:
        print(f"demo: FAILED: {exc}", file=sys.stderr, flush=True)
        code = 1
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr, flush=True)
        code = 130
    if tmp is not None and code == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
