from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "testproject.demo"
    label = "demo"
    verbose_name = "Demo"
