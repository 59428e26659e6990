"""Live events under WSGI (SPEC §8): the stream answers 501 saying to run an ASGI server,
instead of holding the request open with nothing sent; ``django_jobs.W020`` says so at
``manage.py check`` when the job URLs are routed and no ``ASGI_APPLICATION`` is set.

Django's test ``Client`` is a WSGI handler (its requests are ``WSGIRequest``s), as are
``runserver`` without daphne, gunicorn and uWSGI. The streams under ASGI (daphne) are in
``test_events_live.py`` and ``test_quickstart.py``.
"""

from __future__ import annotations

import time

import pytest
from django.test import override_settings
from django.urls import include, path

from django_jobs.events.checks import check_asgi_application

#: A project's URLconf that routes the job API (nested, as a project's own include may be).
urlpatterns = [path("project/", include([path("api/jobs/", include("django_jobs.urls"))]))]


@pytest.mark.django_db
def test_the_stream_answers_501_under_wsgi_saying_to_run_an_asgi_server(api_client, api_users):
    started = time.monotonic()
    response = api_client(api_users.member).get(
        "/api/jobs/events/", HTTP_ACCEPT="text/event-stream"
    )
    assert time.monotonic() - started < 5
    assert response.status_code == 501
    assert not response.streaming
    body = response.json()
    assert body["code"] == "ASGI_REQUIRED"
    for words in ("ASGI server", "daphne", "uvicorn", "ASGI_APPLICATION", '"daphne" first'):
        assert words in body["message"]


@pytest.mark.django_db
def test_the_501_names_the_projects_asgi_module(api_client, api_users, settings):
    settings.WSGI_APPLICATION = "mysite.wsgi.application"
    response = api_client(api_users.operator).get("/api/jobs/events/")
    message = response.json()["message"]
    assert "daphne mysite.asgi:application" in message
    assert 'ASGI_APPLICATION = "mysite.asgi.application"' in message


@pytest.mark.django_db
def test_refusals_still_come_first_under_wsgi(client, api_client, api_users):
    assert client.get("/api/jobs/events/").status_code == 401
    member = api_client(api_users.member)
    assert member.get("/api/jobs/events/?recover=true").status_code == 400
    assert member.post("/api/jobs/events/").status_code == 405


def ids() -> set[str]:
    return {message.id for message in check_asgi_application()}


def test_the_check_warns_when_the_job_urls_are_routed_without_asgi_application():
    with override_settings(ROOT_URLCONF=__name__, ASGI_APPLICATION=None):
        [warning] = check_asgi_application()
    assert warning.id == "django_jobs.W020"
    assert not warning.is_serious()  # a warning: manage.py test and runserver still run
    assert "ASGI_APPLICATION" in warning.msg and "501" in warning.msg
    assert "daphne" in warning.hint and "mysite.asgi.application" in warning.hint
    with override_settings(ROOT_URLCONF="testproject.urls", ASGI_APPLICATION=None):
        assert ids() == {"django_jobs.W020"}


def test_the_check_is_quiet_with_asgi_application_or_without_the_job_urls():
    with override_settings(ROOT_URLCONF=__name__, ASGI_APPLICATION="mysite.asgi.application"):
        assert ids() == set()
    with override_settings(ROOT_URLCONF="tests.integration.test_events_wsgi_other_urls"):
        assert ids() == set()  # an URLconf that does not import: Django's own checks say so
    with override_settings(ROOT_URLCONF=NoJobUrls, ASGI_APPLICATION=None):
        assert ids() == set()


class NoJobUrls:
    """A URLconf (as an object) of a project that does not route the job API."""

    urlpatterns = [path("pages/", include([path("about/", lambda request: None)]))]
