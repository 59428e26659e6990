"""The ASGI application: Django over HTTP, the live job events over WebSocket (``ws/jobs/``).

Run it with ``daphne testproject.asgi:application`` (or ``manage.py runserver``, which is
daphne here). Server-Sent Events need an ASGI server; they do not stream under WSGI.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
# Django first: it sets up the apps that the routing below imports.
django_application = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from django_jobs.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_application,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
