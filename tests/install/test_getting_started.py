"""docs/getting-started.md followed as written, in a new project, with the package installed
from the wheel into a new virtual environment (``pip install "<wheel>[asgi]"``, as the page's
``pip install "path/to/checkout[asgi]"``): on SQLite, without psycopg; then on PostgreSQL, with
the page's PostgreSQL settings block (its connection pool) on a database made for the run, in
the same environment with the ``postgres`` extra added as the page says
(``"path/to/checkout[asgi,postgres]"``) and taken out again afterwards.

The page's blocks are the test's input, so the two cannot drift: the shell lines are run as the
page has them (``startproject``, ``startapp``, ``migrate``, ``check``, ``runjobs``, ``test``),
the ``# mysite/settings.py: at the end`` blocks are appended to the settings, the
``# mysite/urls.py``, ``# shop/jobs.py`` and ``# shop/tests.py`` blocks are those files, and the
``# python manage.py shell`` block runs in ``manage.py shell``. Where a step needs a person,
the test does the same non-interactively: ``createsuperuser --noinput`` (with the
``DJANGO_SUPERUSER_*`` variables), ``runserver 127.0.0.1:<free port> --noreload``, and it signs
in to the admin with the login form as a browser does.

The worker is a real ``manage.py runjobs`` process, stopped with SIGTERM; the web server is
``manage.py runserver`` served by daphne (``"daphne"`` first in ``INSTALLED_APPS``). The job is
seen ``succeeded`` on its admin page and as ``job.succeeded`` on the event stream, replayed with
``Last-Event-ID``; the worker's ``job.ended`` line has the keys, in the order, of the page's
example line. On PostgreSQL the worker runs with the ``--concurrency`` the page says its pool
serves, and every job succeeds at its first attempt.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, SSEClient, free_port, wait_until
from tests.install.conftest import Venv, page_blocks, run

pytestmark = [pytest.mark.install, pytest.mark.process]

PAGE = ROOT / "docs" / "getting-started.md"
PASSWORD = "a-new-users-password-7"
PAGE_BASE = "http://127.0.0.1:8000"  # the server the page's examples call


class Page:
    """docs/getting-started.md's blocks: shell lines and the Python blocks by their first line."""

    def __init__(self) -> None:
        text = PAGE.read_text()
        self.lines = [
            line.split("#")[0].strip()
            for block in page_blocks(text, "bash")
            for line in block.splitlines()
        ]
        self.python = page_blocks(text, "python")
        self.bash = page_blocks(text, "bash")

    def line(self, command: str) -> list[str]:
        """``command`` as argv, once the page is seen to have that line."""
        assert command in self.lines, f"docs/getting-started.md has no line {command!r}"
        return command.split()

    def blocks(self, first_line: str) -> list[str]:
        found = [b for b in self.python if b.startswith(f"{first_line}\n")]
        assert found, f"docs/getting-started.md has no python block starting {first_line!r}"
        return found

    def file(self, first_line: str) -> str:
        [block] = self.blocks(first_line)
        return block


def start(venv: Venv, argv: list[str], cwd: Path, log: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=venv.env(**env),
        stdout=open(log, "wb"),  # the process's; closed after it ends
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for(log: Path, text: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    def seen() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args} exited {proc.returncode}:\n{log.read_text()}")
        return text in log.read_text(errors="replace")

    wait_until(seen, timeout=timeout, message=f"{text!r} not seen in {log}")


def sign_in(base: str, username: str) -> tuple[urllib.request.OpenerDirector, str]:
    """The admin's login form, as a browser fills it: the opener keeps the cookies."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = opener.open(f"{base}/admin/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)
    data = urllib.parse.urlencode(
        {
            "csrfmiddlewaretoken": token,
            "username": username,
            "password": PASSWORD,
            "next": "/admin/",
        }
    ).encode()
    request = urllib.request.Request(
        f"{base}/admin/login/", data=data, headers={"Referer": f"{base}/admin/login/"}
    )
    opener.open(request, timeout=30).read()
    cookies = {c.name: c.value for c in jar}
    assert "sessionid" in cookies, "the admin did not sign the superuser in"
    return opener, cookies["sessionid"]


@dataclass(frozen=True)
class Project(Venv):
    """The installed environment, with the variables every command of the project gets (the
    PostgreSQL walk's ``PG*``: the page's settings read the connection from them)."""

    variables: dict[str, str] = field(default_factory=dict, compare=False)

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(**{**self.variables, **extra})


def test_the_getting_started_page_followed_in_a_new_project(installed: Venv, tmp_path):
    walk(Project(installed.path, installed.seconds), tmp_path, "on SQLite", [], ids_jump=False)


def test_the_getting_started_page_followed_on_postgresql(
    postgres_extra: dict[str, str], installed: Venv, tmp_path
):
    text = PAGE.read_text()
    # The worker's --concurrency that the page says its pool serves: the walk runs it so.
    said = re.search(r"serves a `--concurrency (\d+)` worker", text)
    assert said, "docs/getting-started.md no longer says which --concurrency its pool serves"
    project = Project(installed.path, installed.seconds, postgres_extra)
    worker_options = ["--concurrency", said.group(1)]
    walk(project, tmp_path, "on PostgreSQL", worker_options, ids_jump=True)


def postgres_server() -> dict[str, str]:
    """libpq's variables for the tests' PostgreSQL server (``DATABASE_URL``'s, else
    ``PG_BASE_URL``'s, else the local one .ci/run uses)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        url = os.environ.get("PG_BASE_URL") or "postgres://postgres@127.0.0.1:5432"
    parsed = urllib.parse.urlparse(url)
    return {
        "PGHOST": parsed.hostname or "127.0.0.1",
        "PGPORT": str(parsed.port or 5432),
        "PGUSER": urllib.parse.unquote(parsed.username or "postgres"),
        "PGPASSWORD": urllib.parse.unquote(parsed.password or ""),
    }


@pytest.fixture
def postgres_database() -> Iterator[dict[str, str]]:
    """A new database for the project (``PGDATABASE`` with the server's variables), dropped
    afterwards with the test database ``manage.py test`` makes beside it."""
    import psycopg

    server = postgres_server()
    try:
        admin = psycopg.connect(
            host=server["PGHOST"],
            port=server["PGPORT"],
            user=server["PGUSER"],
            password=server["PGPASSWORD"],
            dbname="postgres",
            autocommit=True,
            connect_timeout=5,
        )
    except psycopg.OperationalError as exc:
        pytest.skip(
            f"PostgreSQL is not reachable at {server['PGHOST']}:{server['PGPORT']} "
            f"(set PG_BASE_URL=postgres://user@host:port): {exc}"
        )
    name = f"getting_started_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield {**server, "PGDATABASE": name}
        finally:
            for database in (name, f"test_{name}"):
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture
def postgres_extra(
    postgres_database: dict[str, str], installed: Venv, wheel: Path
) -> Iterator[dict[str, str]]:
    """The ``postgres`` extra installed into the session's environment as the page says
    (``pip install "path/to/checkout[asgi,postgres]"``), and uninstalled after the test: the
    other tests of the environment see it without psycopg, as SQLite users have it."""
    assert '"path/to/checkout[asgi,postgres]"' in PAGE.read_text()
    pip = [sys.executable, "-m", "pip", "--python", installed.python]
    env = installed.env(PIP_DISABLE_PIP_VERSION_CHECK="1")

    def names() -> set[str]:
        listed = run([*pip, "list", "--format=freeze"], env=env).stdout
        return {line.split("==")[0].lower() for line in listed.splitlines() if "==" in line}

    before = names()
    run([*pip, "install", f"{wheel}[asgi,postgres]"], env=env, timeout=600)
    added = sorted(names() - before)
    try:
        assert "psycopg" in added, added
        yield postgres_database
    finally:
        run([*pip, "uninstall", "--yes", *added], env=env)


def ended_example() -> tuple[str, list[tuple[str, str]]]:
    """The page's example of the worker's ``job.ended`` line: what comes before ``job.ended``,
    and its ``key=value`` pairs in order."""
    [example] = [b for b in page_blocks(PAGE.read_text(), "text") if "job.ended " in b]
    return split_ended(example.strip())


def split_ended(line: str) -> tuple[str, list[tuple[str, str]]]:
    head, _, fields = line.partition("job.ended ")
    return head, [tuple(pair.split("=", 1)) for pair in fields.split()]  # type: ignore[misc]


def ended_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if "job.ended " in line]


def walk(
    project: Project, tmp_path: Path, database: str, worker_options: list[str], *, ids_jump: bool
):
    """The page from ``startproject`` to ``manage.py test``, with the page's ``database``
    settings block (``# mysite/settings.py: at the end, <database>``). ``ids_jump``: the
    database draws job ids ahead (PostgreSQL), so the API's first job is not job 2."""
    page = Page()
    assert 'pip install "path/to/checkout[asgi]"' in page.lines  # what the fixture did

    # django-admin startproject mysite; cd mysite; python manage.py startapp shop
    project.run(page.line("django-admin startproject mysite"), cwd=tmp_path)
    assert "cd mysite" in page.lines
    site = tmp_path / "mysite"
    project.run(page.line("python manage.py startapp shop"), cwd=site)

    settings = site / "mysite" / "settings.py"
    with open(settings, "a") as file:
        for first_line in ("", f", {database}", ", for API tokens"):
            for block in page.blocks(f"# mysite/settings.py: at the end{first_line}"):
                file.write("\n" + block)
    for name in ("mysite/urls.py", "shop/jobs.py", "shop/tests.py"):
        (site / name).write_text(page.file(f"# {name}"))

    # Without its idempotency_key, the job's module fails at start-up, naming its file and line
    # as the page says.
    jobs_py = site / "shop" / "jobs.py"
    jobs_py.write_text(
        "".join(
            line
            for line in page.file("# shop/jobs.py").splitlines(keepends=True)
            if not line.lstrip().startswith("idempotency_key=")
        )
    )
    refused = project.run(page.line("python manage.py check"), cwd=site, check=False)
    said = re.search(r"`(shop/jobs\.py:\d+: @job\(.*?)\.\.\.`", PAGE.read_text(), re.S)
    assert said, "docs/getting-started.md no longer quotes the IdempotencyRequired message"
    assert refused.returncode != 0
    assert " ".join(said.group(1).split()) in refused.stderr, refused.stderr
    jobs_py.write_text(page.file("# shop/jobs.py"))

    project.run(page.line("python manage.py migrate"), cwd=site)
    checked = project.run(page.line("python manage.py check"), cwd=site)
    assert "no issues" in checked.stdout and "django_jobs" not in checked.stderr
    superuser = project.env(
        DJANGO_SUPERUSER_USERNAME="admin",
        DJANGO_SUPERUSER_EMAIL="admin@example.com",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )
    project.run(
        [*page.line("python manage.py createsuperuser"), "--noinput"], cwd=site, env=superuser
    )

    # Enqueue, in `python manage.py shell`.
    shell = page.file("# python manage.py shell")
    enqueued = project.run(["python", "manage.py", "shell", "-c", shell], cwd=site)
    pk, state = enqueued.stdout.split()[-2:]
    assert state == "queued"

    worker_log, server_log = tmp_path / "runjobs.log", tmp_path / "runserver.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start(
        project, [*page.line("python manage.py runjobs"), *worker_options], site, worker_log
    )
    server = start(
        project,
        [*page.line("python manage.py runserver"), f"127.0.0.1:{port}", "--noreload"],
        site,
        server_log,
    )
    try:
        wait_for(worker_log, "runjobs: worker", worker)
        wait_for(server_log, "Starting ASGI/Daphne", server)
        wait_until(lambda: _accepting(base), timeout=60, message="runserver is not listening")
        opener, session = sign_in(base, "admin")

        job_page = f"{base}/admin/django_jobs/job/{pk}/change/"

        def succeeded() -> bool:
            return "succeeded" in opener.open(job_page, timeout=30).read().decode()

        wait_until(succeeded, timeout=60, message=f"job {pk} not succeeded on {job_page}")

        # The worker's line for it, as the page's example line: the same keys in the same
        # order, after a timestamp, the level and the logger as the example has them.
        def ended() -> list[str]:
            if worker.poll() is not None:
                output = worker_log.read_text()
                raise AssertionError(f"runjobs exited {worker.returncode}:\n{output}")
            return [t for t in ended_lines(worker_log) if dict(split_ended(t)[1])["job"] == pk]

        [line] = wait_until(ended, timeout=60, message=f"no job.ended line for job {pk}")
        head, fields = split_ended(line)
        example_head, example = ended_example()
        assert re.fullmatch(re.sub(r"\d", r"\\d", re.escape(example_head)), head), line
        assert [key for key, _ in fields] == [key for key, _ in example], (line, example)
        for (key, value), (_, shown) in zip(fields, example, strict=True):
            if key == "job":
                assert value == pk, line
            elif key == "duration_s":
                assert float(value) >= 0, line
            else:  # kind=shop.invoice attempt=1 outcome=succeeded
                assert value == shown, (line, example)
        html = opener.open(job_page, timeout=30).read().decode()
        assert "render" in html and "email" in html  # its durable steps

        # The event stream, from the first event on (Last-Event-ID replay): the superuser is an
        # operator, whose channel carries every job's events.
        sse = SSEClient(base, cookie=session, last_event_id="jobs-operators:0")
        try:
            assert sse.status == 200
            events = sse.job_events(
                until=lambda e: e["type"] == "job.succeeded" and e["job"]["id"] == int(pk)
            )
        finally:
            sse.close()
        types = [e["type"] for e in events if e["job"]["id"] == int(pk)]
        assert types[0] == "job.created" and types[-1] == "job.succeeded"
        assert "job.started" in types and "job.log" in types

        api_ids = api_calls(project, page, site, base, opener, ids_jump=ids_jump)

        # Every job ran once and succeeded: the shell's and the three submitted over the API.
        ran = [dict(split_ended(t)[1]) for t in ended_lines(worker_log)]
        assert sorted(int(f["job"]) for f in ran) == sorted([int(pk), *api_ids])
        assert {(f["attempt"], f["outcome"]) for f in ran} == {("1", "succeeded")}

        worker.send_signal(signal.SIGTERM)  # the page: SIGTERM lets running jobs finish, exit 0
        assert worker.wait(timeout=60) == 0, worker_log.read_text()
    finally:
        for proc in (worker, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout and proc.stdout.close()

    # Test your jobs: the page's shop/tests.py, with `python manage.py test`.
    tested = project.run(page.line("python manage.py test"), cwd=site, check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Ran 2 tests" in tested.stderr and "OK" in tested.stderr


def api_calls(
    venv: Venv,
    page: Page,
    project: Path,
    base: str,
    opener: urllib.request.OpenerDirector,
    *,
    ids_jump: bool,
) -> list[int]:
    """The page's API examples as written, against the server: curl with HTTP Basic, with a
    session and with a token, then the ``# client.py`` script with requests (a dependency of
    the install). The ids of the jobs they submitted.

    The page's reads ask for job 2, the id its first submit answers on SQLite; where ids jump
    (PostgreSQL: the page's "Job ids on PostgreSQL jump") they ask for the id it answered."""
    env = venv.env(PASSWORD=PASSWORD)
    read_url = f"{PAGE_BASE}/api/jobs/2/"

    def bash(block: str, job_id: int = 2) -> list[dict]:
        script = block.replace(read_url, f"{base}/api/jobs/{job_id}/").replace(PAGE_BASE, base)
        done = venv.run(["bash", "-euo", "pipefail", "-c", script], cwd=project, env=env)
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def block(first_line: str) -> str:
        [found] = [b for b in page.bash if b.startswith(first_line)]
        return found

    # HTTP Basic: the submit, then the read of the job it answered.
    basic = block("# the REST API with curl and HTTP Basic")
    lines = basic.splitlines(keepends=True)
    [at] = [n for n, line in enumerate(lines) if read_url in line]
    [submitted] = bash("".join(lines[:at]))
    [read] = bash("".join(lines[at:]), submitted["id"])
    [by_session] = bash(block("# the REST API with curl and a session"))
    [by_token] = bash(block("# the REST API with curl and a token"), submitted["id"])
    assert by_token["id"] == submitted["id"] and "log" in by_token  # the token read the job
    assert (submitted["kind"], submitted["state"], submitted["deduped"]) == (
        "shop.invoice",
        "queued",
        False,
    )
    assert read["id"] == submitted["id"]
    if not ids_jump:
        assert submitted["id"] == 2  # the id the page's reads ask for
    assert "steps" in read and "log" in read
    assert by_session["payload"] == {"order": 3} and by_session["deduped"] is False

    script = page.file("# client.py: submit a job over the API, then read it")
    ran = venv.run(["python", "-c", script.replace(PAGE_BASE, base)], cwd=project, env=env)
    scripted, state = ran.stdout.split()
    assert state in ("queued", "running", "succeeded"), ran.stdout
    submitted_ids = [submitted["id"], by_session["id"], int(scripted)]
    for pk in submitted_ids:
        job_page = f"{base}/admin/django_jobs/job/{pk}/change/"

        def succeeded(page: str = job_page) -> bool:
            return "succeeded" in opener.open(page, timeout=30).read().decode()

        wait_until(succeeded, timeout=60, message=f"job {pk} submitted over the API not succeeded")

    # The refusals the page names, as JSON.
    import requests

    api = requests.Session()
    assert api.post(f"{base}/api/jobs/", json={}, timeout=10).json()["code"] == (
        "NOT_AUTHENTICATED"
    )
    api.auth = ("admin", PASSWORD)
    for payload, code in (
        ({"kind": "shop.invoice", "payload": {"order": 0}}, "INVALID_PAYLOAD"),
        ({"kind": "shop.invoce", "payload": {"order": 1}}, "UNKNOWN_KIND"),
    ):
        refused = api.post(f"{base}/api/jobs/", json=payload, timeout=10)
        assert (refused.status_code, refused.json()["code"]) == (400, code)
    return submitted_ids


def _accepting(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/admin/login/", timeout=5).read()
    except OSError:
        return False
    return True
