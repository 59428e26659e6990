"""Which pages may open the job WebSocket (``django_jobs.events.origin``)."""

from __future__ import annotations

import pytest

from django_jobs.events.origin import origin_allowed


@pytest.mark.parametrize(
    ("origin", "host", "allowed"),
    [
        (None, "jobs.example.com", True),  # not a browser page
        ("https://jobs.example.com", "jobs.example.com", True),
        ("http://jobs.example.com", "jobs.example.com", True),  # TLS ended by a proxy
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://127.0.0.1:8001", "127.0.0.1:8000", False),  # another port, another site
        ("https://evil.example", "jobs.example.com", False),
        ("https://jobs.example.com.evil.example", "jobs.example.com", False),
        ("null", "jobs.example.com", False),  # a sandboxed page or a file
        ("https://user@jobs.example.com", "jobs.example.com", False),
        ("javascript://jobs.example.com", "jobs.example.com", False),
        ("https://jobs.example.com", None, False),
    ],
)
def test_the_sites_own_pages_only_even_with_any_allowed_host(settings, origin, host, allowed):
    settings.ALLOWED_HOSTS = ["*"]
    settings.CSRF_TRUSTED_ORIGINS = []
    assert origin_allowed(origin, host) is allowed


def test_trusted_origins_and_explicit_allowed_hosts(settings):
    settings.ALLOWED_HOSTS = ["*", ".example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.partner.org", "https://*.cdn.net"]
    assert origin_allowed("https://app.partner.org", "jobs.example.com")
    assert not origin_allowed("http://app.partner.org", "jobs.example.com")  # scheme counts
    assert origin_allowed("https://static.cdn.net", "jobs.example.com")
    assert not origin_allowed("https://cdn.net.evil.example", "jobs.example.com")
    assert origin_allowed("https://admin.example.com", "jobs.example.com")  # ALLOWED_HOSTS
    assert not origin_allowed("https://example.org", "jobs.example.com")
    settings.ALLOWED_HOSTS = ["*"]  # "*" alone allows no other origin
    assert not origin_allowed("https://admin.example.com", "jobs.example.com")
