"""A list page is bounded in bytes (JOBS["MAX_PAGE_BYTES"]), and its links still visit every
row exactly once."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.api.pagination import ROW_OVERHEAD_BYTES
from django_jobs.kinds.registry import lookup
from django_jobs.models import Job

PAYLOAD_BYTES = 4000
BUDGET = 3 * (PAYLOAD_BYTES + 20 + ROW_OVERHEAD_BYTES) + 100  # three such jobs per page


@pytest.fixture
def jobs(api_users, settings):
    settings.JOBS = {**settings.JOBS, "MAX_PAGE_BYTES": BUDGET}
    hello = lookup("demo.hello")
    return [
        hello.as_user(api_users.member, {"n": n, "pad": "x" * PAYLOAD_BYTES}).pk for n in range(11)
    ]


def walk(client, url):
    """Follow next links from ``url``; return the ids seen and the largest body."""
    seen, largest = [], 0
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        largest = max(largest, len(response.content))
        body = response.json()
        seen += [job["id"] for job in body["results"]]
        url = body["next"]
    return seen, largest


def test_a_page_over_the_budget_comes_back_smaller(jobs, api_users, api_client):
    client = api_client(api_users.member)
    response = client.get("/api/jobs/", {"page_size": 10})
    body = response.json()
    assert body["count"] == 11
    assert len(body["results"]) == 3
    assert "page_size=3" in body["next"] and "page=2" in body["next"]
    seen, largest = walk(client, "/api/jobs/?page_size=10")
    assert seen == sorted(jobs, reverse=True)  # every job once, newest first
    assert largest <= BUDGET


def test_a_later_page_starts_where_it_was_asked(jobs, api_users, api_client):
    client = api_client(api_users.member)
    body = client.get("/api/jobs/", {"page_size": 5, "page": 2}).json()
    newest_first = sorted(jobs, reverse=True)
    ids = [job["id"] for job in body["results"]]
    # Rows 5.. requested; 3 fit, but the page must start at row 5: 1 per page (5 % 1 == 0).
    assert ids == newest_first[5:6]
    previous = client.get(body["previous"]).json()
    assert [job["id"] for job in previous["results"]] == newest_first[4:5]


def test_small_pages_are_untouched(jobs, api_users, api_client):
    client = api_client(api_users.member)
    body = client.get("/api/jobs/", {"page_size": 2}).json()
    assert len(body["results"]) == 2
    assert "page_size=2" in body["next"]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(page_size=st.integers(1, 12), page=st.integers(1, 12))
def test_following_links_from_any_page_sees_the_rest_once(
    jobs, api_users, api_client, page_size, page
):
    client = api_client(api_users.member)
    newest_first = sorted(jobs, reverse=True)
    start = (page - 1) * page_size
    if start >= len(jobs):
        assert client.get("/api/jobs/", {"page_size": page_size, "page": page}).status_code == 404
        return
    seen, largest = walk(client, f"/api/jobs/?page_size={page_size}&page={page}")
    assert seen == newest_first[start:]
    assert largest <= BUDGET
    assert Job.objects.count() == 11
