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


def test_a_site_over_tls_is_opened_by_its_https_pages_only(settings):
    from django_jobs.events.origin import handshake_is_secure

    settings.ALLOWED_HOSTS = ["*", ".example.com"]
    settings.CSRF_TRUSTED_ORIGINS = ["http://app.partner.org", "https://*.cdn.net"]
    host = "jobs.example.com"
    assert origin_allowed("https://jobs.example.com", host, secure=True)
    # An http page of the same host is not the site's: anyone on the path can write it.
    assert not origin_allowed("http://jobs.example.com", host, secure=True)
    assert not origin_allowed("http://admin.example.com", host, secure=True)
    assert origin_allowed("https://admin.example.com", host, secure=True)
    assert not origin_allowed("http://app.partner.org", host, secure=True)
    assert origin_allowed("https://static.cdn.net", host, secure=True)
    # Over TLS: wss, or the proxy's header as SECURE_PROXY_SSL_HEADER names it.
    assert handshake_is_secure({"scheme": "wss", "headers": []})
    assert not handshake_is_secure({"scheme": "ws", "headers": [(b"x-forwarded-proto", b"https")]})
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert handshake_is_secure({"scheme": "ws", "headers": [(b"x-forwarded-proto", b"https")]})
    assert not handshake_is_secure({"scheme": "ws", "headers": [(b"x-forwarded-proto", b"http")]})
    assert not handshake_is_secure({"scheme": "ws", "headers": []})
