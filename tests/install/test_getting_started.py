"""docs/getting-started.md followed as written, in a new project, with the package installed
from the wheel into a new virtual environment (``pip install "<wheel>[asgi]"``, as the page's
``pip install "path/to/checkout[asgi]"``), on SQLite, without psycopg.

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
``Last-Event-ID``.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, SSEClient, free_port, wait_until
from tests.install.conftest import Venv, page_blocks

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


def test_the_getting_started_page_followed_in_a_new_project(installed: Venv, tmp_path):
    page = Page()
    assert 'pip install "path/to/checkout[asgi]"' in page.lines  # what the fixture did

    # django-admin startproject mysite; cd mysite; python manage.py startapp shop
    installed.run(page.line("django-admin startproject mysite"), cwd=tmp_path)
    assert "cd mysite" in page.lines
    project = tmp_path / "mysite"
    installed.run(page.line("python manage.py startapp shop"), cwd=project)

    settings = project / "mysite" / "settings.py"
    with open(settings, "a") as file:
        for block in page.blocks("# mysite/settings.py: at the end"):
            file.write("\n" + block)
        for block in page.blocks("# mysite/settings.py: at the end, on SQLite"):
            file.write("\n" + block)
        for block in page.blocks("# mysite/settings.py: at the end, for API tokens"):
            file.write("\n" + block)
    for name in ("mysite/urls.py", "shop/jobs.py", "shop/tests.py"):
        (project / name).write_text(page.file(f"# {name}"))

    # Without its idempotency_key, the job's module fails at start-up, naming its file and line
    # as the page says.
    jobs_py = project / "shop" / "jobs.py"
    jobs_py.write_text(
        "".join(
            line
            for line in page.file("# shop/jobs.py").splitlines(keepends=True)
            if not line.lstrip().startswith("idempotency_key=")
        )
    )
    refused = installed.run(page.line("python manage.py check"), cwd=project, check=False)
    said = re.search(r"`(shop/jobs\.py:\d+: @job\(.*?)\.\.\.`", PAGE.read_text(), re.S)
    assert said, "docs/getting-started.md no longer quotes the IdempotencyRequired message"
    assert refused.returncode != 0
    assert " ".join(said.group(1).split()) in refused.stderr, refused.stderr
    jobs_py.write_text(page.file("# shop/jobs.py"))

    installed.run(page.line("python manage.py migrate"), cwd=project)
    checked = installed.run(page.line("python manage.py check"), cwd=project)
    assert "no issues" in checked.stdout and "django_jobs" not in checked.stderr
    superuser = installed.env(
        DJANGO_SUPERUSER_USERNAME="admin",
        DJANGO_SUPERUSER_EMAIL="admin@example.com",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
    )
    installed.run(
        [*page.line("python manage.py createsuperuser"), "--noinput"], cwd=project, env=superuser
    )

    # Enqueue, in `python manage.py shell`.
    shell = page.file("# python manage.py shell")
    enqueued = installed.run(["python", "manage.py", "shell", "-c", shell], cwd=project)
    pk, state = enqueued.stdout.split()[-2:]
    assert state == "queued"

    worker_log, server_log = tmp_path / "runjobs.log", tmp_path / "runserver.log"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start(installed, page.line("python manage.py runjobs"), project, worker_log)
    server = start(
        installed,
        [*page.line("python manage.py runserver"), f"127.0.0.1:{port}", "--noreload"],
        project,
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
        # The worker's line for it, as the page shows one.
        wait_for(worker_log, f"job.ended job={pk} kind=", worker)
        (line,) = [t for t in worker_log.read_text().splitlines() if f"job.ended job={pk} " in t]
        assert "attempt=1 outcome=succeeded duration_s=" in line, line
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

        api_calls(installed, page, project, base, opener)

        worker.send_signal(signal.SIGTERM)  # the page: SIGTERM lets running jobs finish, exit 0
        assert worker.wait(timeout=60) == 0, worker_log.read_text()
    finally:
        for proc in (worker, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout and proc.stdout.close()

    # Test your jobs: the page's shop/tests.py, with `python manage.py test`.
    tested = installed.run(page.line("python manage.py test"), cwd=project, check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "Ran 2 tests" in tested.stderr and "OK" in tested.stderr


def api_calls(
    venv: Venv, page: Page, project: Path, base: str, opener: urllib.request.OpenerDirector
) -> None:
    """The page's API examples as written, against the server: curl with HTTP Basic and with a
    session, then the ``# client.py`` script with requests (a dependency of the install)."""
    env = venv.env(PASSWORD=PASSWORD)
    answers = []
    for first_line in (
        "# the REST API with curl and HTTP Basic",
        "# the REST API with curl and a session",
        "# the REST API with curl and a token",
    ):
        [block] = [b for b in page.bash if b.startswith(first_line)]
        done = venv.run(
            ["bash", "-euo", "pipefail", "-c", block.replace(PAGE_BASE, base)],
            cwd=project,
            env=env,
        )
        answers += [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    submitted, read, by_session, by_token = answers
    assert by_token["id"] == submitted["id"] and "log" in by_token  # the token read job 2
    assert (submitted["kind"], submitted["state"], submitted["deduped"]) == (
        "shop.invoice",
        "queued",
        False,
    )
    assert read["id"] == submitted["id"] == 2  # the id the page's second line reads
    assert "steps" in read and "log" in read
    assert by_session["payload"] == {"order": 3} and by_session["deduped"] is False

    script = page.file("# client.py: submit a job over the API, then read it")
    ran = venv.run(["python", "-c", script.replace(PAGE_BASE, base)], cwd=project, env=env)
    scripted, state = ran.stdout.split()
    assert state in ("queued", "running", "succeeded"), ran.stdout
    for pk in (submitted["id"], by_session["id"], int(scripted)):
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


def _accepting(base: str) -> bool:
    try:
        urllib.request.urlopen(f"{base}/admin/login/", timeout=5).read()
    except OSError:
        return False
    return True
