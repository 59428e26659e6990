"""Which browser pages may open the job WebSocket: the site's own (SPEC §7).

A browser sends the page's ``Origin`` with a WebSocket handshake, and the user's cookies with
it whatever the origin is: without this check, any page the user visits could read their job
events. Channels' ``AllowedHostsOriginValidator`` allows every origin when ``ALLOWED_HOSTS`` is
``["*"]``, so the consumer checks for itself. An origin is allowed when its host is the one
the request was sent to (``Host``; its port too when it names one), or it is in
``CSRF_TRUSTED_ORIGINS`` (wildcards as Django's CSRF check reads them), or its host matches
an ``ALLOWED_HOSTS`` entry other than ``"*"``. A handshake without ``Origin`` is not from a
browser page, and is allowed (it still needs a signed-in session).

The scheme counts: a site served over TLS (``wss``, or ``SECURE_PROXY_SSL_HEADER`` naming a
header the proxy set, as Django's ``request.is_secure()`` reads it) is opened by its
``https://`` pages only, never by an ``http://`` page of the same host, which anyone on the
network path can write. A site served without TLS is also opened by ``https://`` pages of its
host (TLS ended by a proxy that sets no header).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _host_port(scheme: str, netloc: str) -> tuple[str, str]:
    domain, port = split_domain_port(netloc.lower())
    return domain, port or _DEFAULT_PORTS.get(scheme, "")


def handshake_is_secure(scope: dict[str, Any]) -> bool:
    """Was the handshake sent over TLS: ``wss``, or the proxy's header named by
    ``SECURE_PROXY_SSL_HEADER`` (as ``request.is_secure()`` reads it)?"""
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy:
        return False
    name, expected = proxy
    header = name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
    for key, value in scope.get("headers") or []:
        if key.lower() == header:
            return bool(value.decode("latin-1").split(",")[0].strip() == expected)
    return False


def origin_allowed(origin: str | None, host: str | None, *, secure: bool = False) -> bool:
    """May a page of ``origin`` open a WebSocket sent to ``host`` (the ``Host`` header), over
    TLS when ``secure``?"""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        netloc = parts.netloc
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not netloc or "@" in netloc:
        return False  # "null" (a sandboxed or file page), or not a page's origin at all
    if secure and parts.scheme != "https":
        return False  # a page without TLS must not read what a site over TLS sends
    domain, port = _host_port(parts.scheme, netloc)
    if not domain:
        return False
    if host:
        # The port counts when the Host names one; without one, the scheme's default port
        # may differ from the page's behind a TLS-terminating proxy, so the domain decides.
        own_domain, own_port = split_domain_port(host.lower())
        if domain == own_domain and (not own_port or port == own_port):
            return True
    if _csrf_trusted(parts.scheme, netloc):
        return True
    explicit = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    return bool(explicit) and validate_host(domain, explicit)


def _csrf_trusted(scheme: str, netloc: str) -> bool:
    origin = f"{scheme}://{netloc.lower()}"
    for trusted in getattr(settings, "CSRF_TRUSTED_ORIGINS", []):
        trusted = trusted.lower()
        if trusted == origin:
            return True
        if "://*." in trusted:  # https://*.example.com: any subdomain, same scheme
            trusted_scheme, _, suffix = trusted.partition("://*")
            if scheme == trusted_scheme and netloc.lower().endswith(suffix):
                return True
    return False
