"""The admin's Charts page: the rollups drawn as SVG for each window, linked from the overview."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from tests.integration.charts_seed import seed_history
from tests.integration.test_admin import operator, signed_in, viewer  # noqa: F401 - fixtures

CHARTS = "/admin/django_jobs/job/charts/"
DRAWN = ("jobs", "runtime", "pickup", "depth", "oldest")


def charts_of(html: str) -> dict[str, tuple[int, int]]:
    """Each chart's name -> (buckets, values drawn)."""
    found = re.findall(r'data-chart="(\w+)" data-buckets="(\d+)" data-values="(\d+)"', html)
    return {name: (int(buckets), int(values)) for name, buckets, values in found}


@pytest.mark.parametrize(("window", "buckets"), [("1h", 60), ("24h", 96), ("7d", 168)])
def test_each_window_draws_every_chart_with_axes_and_legends(operator, window, buckets):  # noqa: F811
    seed_history(timezone.now())
    page = signed_in(operator).get(f"{CHARTS}?window={window}")
    assert page.status_code == 200
    html = page.content.decode()
    drawn = charts_of(html)
    assert list(drawn) == list(DRAWN)
    for name, (n, values) in drawn.items():
        assert n == buckets, name
        assert values >= buckets - 2, name  # a value in (nearly) every bucket
    assert "shop.sync_stock p95" in html and ">succeeded<" in html  # the legends
    assert "jobs per minute" in html if window == "1h" else "jobs per" in html  # the unit
    assert re.search(r">\d+(\.\d)? s<", html)  # a duration axis in seconds
    assert (
        'aria-current="page" class="djj-current">' + window.replace("h", " h").replace("d", " d")
        in html
    )
    assert "data-djj-live" in html and "<script" not in html.split("<body")[1]


def test_the_filters_narrow_the_kinds_and_queues(operator):  # noqa: F811
    seed_history(timezone.now(), days=1)
    html = signed_in(operator).get(f"{CHARTS}?window=24h&queue=mail").content.decode()
    assert "shop.send_receipt p50" in html and "shop.sync_stock p50" not in html
    legend = html.split('id="djj-chart-depth"')[1].split("</figure>")[0]
    assert ">mail<" in legend and ">default<" not in legend
    html = signed_in(operator).get(f"{CHARTS}?kind=shop.sync_stock").content.decode()
    assert "shop.sync_stock p50" in html and "shop.send_receipt p50" not in html


def test_an_empty_window_says_so_and_a_bad_filter_falls_back(operator):  # noqa: F811
    client = signed_in(operator)
    html = client.get(CHARTS).content.decode()
    assert html.count("Nothing in this window yet.") == len(DRAWN)
    html = client.get(f"{CHARTS}?window=2h", follow=True).content.decode()
    assert "send 1h, 24h or 7d" in html and "Showing every job of the last hour" in html


def test_the_overview_and_workers_pages_link_to_it_and_viewers_may_look(operator, viewer):  # noqa: F811
    for page in ("overview/", "workers/"):
        assert (
            f'href="{CHARTS}"'
            in signed_in(operator).get(f"/admin/django_jobs/job/{page}").content.decode()
        )
    assert signed_in(viewer).get(CHARTS).status_code == 200
