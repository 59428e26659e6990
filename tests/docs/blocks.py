"""Run the ```python blocks of a Markdown page, in order, as docs/contributing.md describes.

``run_page(path)`` runs every block of one page in one namespace, like a doctest session, on
the database the caller holds (the test's transaction), and raises ``BlockFailed`` naming the
page and the first line of the block that failed. What it undoes when the page ends: the kinds
and schedules the page declared (a kind the test project already has is put back), the modules
the page made.
"""

from __future__ import annotations

import ast
import builtins
import dis
import inspect
import os
import re
import shutil
import sys
import tempfile
import traceback
import types
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
SETUP = re.compile(r"^\s*<!--\s*setup:(?P<rest>.*)$")
#: A block headed ``# path/to/settings.py`` or ``# urls.py`` (any folder): a fragment of it.
CONFIG_FILE = re.compile(r"^#\s*(?:[\w./-]*/)?(?P<file>settings|urls)\.py\b")
#: A block headed ``# client.py``: a script of its own that calls a running server over HTTP.
#: Not run here, where no server runs: tests/install/test_getting_started.py runs each against
#: the page's own project, served by ``runserver``.
CLIENT_SCRIPT = re.compile(r"^#\s*client\.py\b")
#: A block headed ``# app/module.py``: that module, importable by later blocks.
MODULE_FILE = re.compile(r"^#\s*(?P<path>[A-Za-z_]\w*(?:/[A-Za-z_]\w*)+)\.py\s*$")

#: Settings of the apps a project installs with django_jobs: what a fragment may set besides
#: Django's own (``django.conf.global_settings``).
APP_SETTINGS = {
    "JOBS",  # django_jobs
    "TASKS",  # Django 6's django.tasks (the django-tasks backport on 5.2)
    "ASGI_APPLICATION",  # Channels, daphne
    "CHANNEL_LAYERS",  # Channels
    "REST_FRAMEWORK",  # DRF
    "EVENTSTREAM_REDIS",  # django-eventstream
    "EVENTSTREAM_STORAGE_CLASS",
    "EVENTSTREAM_CHANNELMANAGER_CLASS",
    "CELERY_TIMEZONE",  # django_jobs.celery: a beat schedule's zone
    "CELERY_BEAT_SCHEDULE",  # django_jobs.celery: declared as schedules at start
}


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # the block's first line of code, 1-based
    code: str
    setup: bool = False  # a hidden ``<!-- setup: ... -->`` block

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def head(self) -> str:
        for line in self.code.splitlines():
            if line.strip():
                return line.strip()
        return ""


class BlockFailed(AssertionError):
    def __init__(self, block: Block, problem: str) -> None:
        what = "setup block" if block.setup else "python block"
        super().__init__(f"{block.where}: the {what} starting here fails:\n{problem}")
        self.block = block


def parse(page: Path) -> list[Block]:
    """The ```python blocks and the ``<!-- setup: ... -->`` comments of ``page``, in order."""
    resolved = page.resolve()
    name = str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(page)
    lines = page.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        setup = SETUP.match(lines[i])
        if match:
            fence, indent = match["fence"], len(match["indent"])
            start = i + 1
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(fence):
                i += 1
            if match["lang"] in ("python", "py"):
                body = [line[indent:] for line in lines[start:i]]
                blocks.append(Block(name, start + 1, "\n".join(body) + "\n"))
        elif setup:
            # The code starts after "setup:", on that line or the next, and ends at "-->".
            first = i + 1 if setup["rest"].strip() else i + 2  # 1-based
            body = [setup["rest"]] if setup["rest"].strip() else []
            while "-->" not in (body[-1] if body else "") and i + 1 < len(lines):
                i += 1
                body.append(lines[i])
            code = "\n".join(body).split("-->", 1)[0]
            blocks.append(Block(name, first, _dedent(code), setup=True))
        i += 1
    return blocks


def _dedent(code: str) -> str:
    import textwrap

    return textwrap.dedent(code).rstrip() + "\n"


def _compile(block: Block) -> types.CodeType:
    # Padded so that a traceback's line numbers are the page's.
    return compile("\n" * (block.line - 1) + block.code, block.page, "exec")


# --- what a page leaves behind, and how it is undone -------------------------------------------


@dataclass
class Page:
    """One page's session: the namespace its blocks share and what to undo at its end."""

    path: Path
    blocks: list[Block]
    namespace: dict[str, Any] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)
    attributes: list[tuple[types.ModuleType, str]] = field(default_factory=list)
    tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="docs-")))

    def module(self, name: str, **attributes: Any) -> types.ModuleType:
        """Make the module ``name`` (and its packages) with ``attributes``: an app's module
        that the page's examples import (``module("shop.models", Order=Order)``)."""
        parts = name.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package not in sys.modules:
                made = types.ModuleType(package)
                made.__path__ = []
                made.__spec__ = ModuleSpec(package, None, is_package=True)
                made.__package__ = package
                sys.modules[package] = made
                self.modules.append(package)
        if name in sys.modules and name not in self.modules:
            raise RuntimeError(
                f"the module {name!r} exists already: the example should use another name"
            )
        made = types.ModuleType(name)
        made.__spec__ = ModuleSpec(name, None)
        made.__package__ = name.rpartition(".")[0]
        made.__dict__.update(attributes)
        sys.modules[name] = made
        self.modules.append(name)
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, made)
            self.attributes.append((sys.modules[parent], child))
        return made

    def alias(self, name: str, target: types.ModuleType) -> None:
        """Make ``target`` importable as ``name`` too, while the page runs (Django 6's
        ``django.tasks`` as the django-tasks backport on Django 5.2)."""
        if name in sys.modules:
            raise RuntimeError(f"the module {name!r} exists already")
        sys.modules[name] = target
        self.modules.append(name)


def declared_kinds(blocks: list[Block]) -> set[str]:
    """The kinds that the blocks' ``@job("kind", ...)`` decorators declare (read, not run)."""
    kinds: set[str] = set()
    for block in blocks:
        try:
            tree = ast.parse(block.code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "job"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                kinds.add(node.args[0].value)
    return kinds


@contextmanager
def isolated(page: Page) -> Iterator[None]:
    """The registry and the declared schedules as they were, and no module of the page, once
    the page has run. A kind the test project has that the page declares anew is taken out
    while the page runs (so the page's own definition registers), then put back."""
    from django_jobs.engine import schedules
    from django_jobs.kinds import registry

    before = {h.kind: h for h in registry.all_handles()}
    scheduled = {h.name: h for h in schedules.declared()}
    for kind in declared_kinds(page.blocks) & before.keys():
        registry.unregister(kind)
    try:
        yield
    finally:
        for handle in registry.all_handles():
            if before.get(handle.kind) is not handle:
                registry.unregister(handle.kind)
        for kind, handle in before.items():
            if registry.get(kind) is None:
                registry.register(handle)
        for name in [h.name for h in schedules.declared()]:
            if scheduled.get(name) is None:
                schedules.undeclare(name)
        for name in reversed(page.modules):
            sys.modules.pop(name, None)
        for parent, child in page.attributes:
            if hasattr(parent, child):
                delattr(parent, child)
        shutil.rmtree(page.tmp, ignore_errors=True)


# --- running the blocks ------------------------------------------------------------------------


def run_page(path: Path) -> int:
    """Run every block of the page at ``path``; return how many ran."""
    blocks = parse(path)
    page = Page(path, blocks)
    page.namespace.update(
        {
            "__name__": f"docs_{path.stem.replace('-', '_')}",
            "module": page.module,
            "alias": page.alias,
        }
    )
    with isolated(page):
        for block in blocks:
            try:
                run_block(page, block)
            except BlockFailed:
                raise
            except BaseException as exc:
                raise BlockFailed(block, _traceback(exc)) from exc
        check_names(page)
    return len(blocks)


def check_names(page: Page) -> None:
    """A function that a block defines but no block calls must still name only what exists:
    every global it reads is defined, once the page has run, where the function looks."""
    namespaces = [page.namespace] + [
        vars(sys.modules[name]) for name in page.modules if name in sys.modules
    ]
    pages = {block.page for block in page.blocks}
    for namespace in namespaces:
        for value in list(namespace.values()):
            for func in _functions(value):
                if func.__code__.co_filename not in pages:  # imported, not the page's
                    continue
                missing = sorted(
                    name
                    for name in _globals_read(func.__code__)
                    if name not in func.__globals__ and not hasattr(builtins, name)
                )
                if missing:
                    line = func.__code__.co_firstlineno
                    block = next(b for b in reversed(page.blocks) if b.line <= line)
                    raise BlockFailed(
                        block,
                        f"{func.__qualname__} (line {line}) uses {', '.join(missing)}, defined "
                        "nowhere: import it in the block, or define it in a setup comment.",
                    )


def _functions(value: Any) -> Iterator[types.FunctionType]:
    from django_jobs.kinds.handle import JobHandle

    if isinstance(value, JobHandle):
        value = value.func
    if isinstance(value, types.FunctionType):
        yield value
    elif isinstance(value, type):
        for member in vars(value).values():
            if isinstance(member, classmethod | staticmethod):
                member = member.__func__
            if isinstance(member, types.FunctionType):
                yield member


def _globals_read(code: types.CodeType) -> Iterator[str]:
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            yield instruction.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _globals_read(const)


def run_block(page: Page, block: Block) -> None:
    code = _compile(block)
    head = block.head
    if not block.setup and CLIENT_SCRIPT.match(head):
        return
    if not block.setup and CONFIG_FILE.match(head):
        check_config_fragment(page, block, code)
        return
    module_file = MODULE_FILE.match(head)
    if not block.setup and module_file:
        module = page.module(module_file["path"].replace("/", "."))
        module.__file__ = block.page
        exec(code, module.__dict__)
        run_tests(block, module.__dict__, module.__name__, set())
        return
    seen = set(page.namespace)
    exec(code, page.namespace)
    run_tests(block, page.namespace, page.namespace["__name__"], seen)


def run_tests(block: Block, namespace: dict[str, Any], owner: str, seen: set[str]) -> None:
    """Run the ``TestCase`` classes and ``test_*`` functions that the block defined."""
    for name, value in list(namespace.items()):
        if name in seen or getattr(value, "__module__", None) != owner:
            continue
        if isinstance(value, type) and issubclass(value, unittest.TestCase):
            suite = unittest.defaultTestLoader.loadTestsFromTestCase(value)
            result = unittest.TestResult()
            with fresh_jobs(), connections_kept_open():
                suite.run(result)
            problems = [f"{test.id()}:\n{text}" for test, text in result.errors + result.failures]
            problems += [f"{test.id()}: unexpected success" for test in result.unexpectedSuccesses]
            if problems or not result.testsRun:
                raise BlockFailed(block, "\n".join(problems) or f"{name} has no test to run")
        elif name.startswith("test_") and inspect.isfunction(value):
            arguments = _fixtures(block, value)
            with fresh_jobs():
                value(**arguments)


@contextmanager
def connections_kept_open() -> Iterator[None]:
    """Django's ``TestCase.tearDownClass`` closes the connections; inside the page's test
    transaction that would end it under the blocks that come after."""
    from contextlib import ExitStack
    from unittest import mock

    from django.db import connections

    with ExitStack() as stack:
        for connection in connections.all(initialized_only=True):
            stack.enter_context(mock.patch.object(connection, "close", lambda: None))
        yield


@contextmanager
def fresh_jobs() -> Iterator[None]:
    """A test of a block starts with no job, as in a fresh test database (the page's other
    rows stay); what it and the test did is rolled back after it."""
    from django.db import transaction

    from django_jobs.models import Job

    with transaction.atomic():
        Job.objects.all().delete()
        try:
            yield
        finally:
            transaction.set_rollback(True)


def _fixtures(block: Block, func: Callable[..., Any]) -> dict[str, Any]:
    # A pytest-style test function: its ``db`` fixture is the page's database access.
    arguments: dict[str, Any] = {}
    for parameter in inspect.signature(func).parameters:
        if parameter != "db":
            raise BlockFailed(
                block,
                f"{func.__name__}({parameter}): the only fixture a page's test function gets "
                "is `db`; write a TestCase for anything more.",
            )
        arguments[parameter] = None
    return arguments


def _traceback(exc: BaseException) -> str:
    # From the page's own frames on: the harness's frames say nothing about the example.
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


# --- settings.py and urls.py fragments --------------------------------------------------------


def check_config_fragment(page: Page, block: Block, code: types.CodeType) -> None:
    """Run a settings.py or urls.py fragment in a namespace of its own (``...`` stands for the
    project's own entries; ``BASE_DIR`` is there, as in Django's settings.py), then check what
    it sets against what the project accepts."""
    from unittest import mock

    # ``BASE_DIR`` is there, as in Django's settings.py; ``INSTALLED_APPS`` too, empty, for a
    # fragment that adds to it (``INSTALLED_APPS += [...]``).
    namespace: dict[str, Any] = {
        "__name__": "settings_fragment",
        "BASE_DIR": page.tmp,
        "INSTALLED_APPS": [],
    }
    problems: list[str] = []
    with mock.patch.dict(os.environ, local_postgres()):
        exec(code, namespace)
        names = [name for name in namespace if name.isupper() and not name.startswith("_")]
        for name in names:
            if name == "BASE_DIR":
                continue
            problems += _check_setting(page, name, namespace[name])
    if "urlpatterns" in namespace:
        problems += _check_urlpatterns(namespace["urlpatterns"])
    if problems:
        raise BlockFailed(block, "\n".join(problems))


def local_postgres() -> dict[str, str]:
    """libpq's variables (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGPASSWORD``, ``PGDATABASE``)
    naming the PostgreSQL the tests use: a settings fragment that reads its database from the
    environment, as a production settings file does, connects there. The server of
    ``DATABASE_URL`` when it is PostgreSQL (its test database), else ``PG_BASE_URL`` (default
    ``postgres://postgres@127.0.0.1:5432``, its ``postgres`` database)."""
    from urllib.parse import unquote, urlparse

    from django.db import connection

    url = os.environ.get("DATABASE_URL", "")
    if connection.vendor == "postgresql":
        name = connection.settings_dict["NAME"]
    else:
        url = os.environ.get("PG_BASE_URL", "postgres://postgres@127.0.0.1:5432")
        name = "postgres"
    parsed = urlparse(url)
    return {
        "PGHOST": parsed.hostname or "127.0.0.1",
        "PGPORT": str(parsed.port or 5432),
        "PGUSER": unquote(parsed.username or "postgres"),
        "PGPASSWORD": unquote(parsed.password or ""),
        "PGDATABASE": name,
    }


def _check_setting(page: Page, name: str, value: Any) -> list[str]:
    from django.conf import global_settings

    if not hasattr(global_settings, name) and name not in APP_SETTINGS:
        return [
            f"{name} is not a setting of Django or of an app the project installs; a helper "
            "value in settings.py is written in lower case (or with a leading underscore)."
        ]
    checker = SETTING_CHECKS.get(name)
    return checker(page, value) if checker else []


def _check_installed_apps(page: Page, value: Any) -> list[str]:
    """Each app is one the test project installs, or the page's own (a ``# shop/jobs.py``
    block of the page makes ``shop`` its app, as ``startapp shop`` would)."""
    from django.conf import settings

    own = {
        match["path"].split("/")[0]
        for block in page.blocks
        if not block.setup and (match := MODULE_FILE.match(block.head))
    }
    # daphne: the test project installs it for runserver only (testproject/settings.py).
    installed = {*settings.INSTALLED_APPS, "daphne"}
    return [
        f"INSTALLED_APPS: {app!r} is not an app the test project installs, nor one the page "
        "writes (a block headed # app/module.py), nor an app of an installed package"
        for app in value
        if app is not Ellipsis
        and app not in installed
        and app not in own
        and not _an_installed_app(app)
    ]


def _an_installed_app(name: str) -> bool:
    """``name`` is a Django app that an installed package ships (``rest_framework.authtoken``):
    its module imports and has an ``apps`` module or ``models``."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None and (
            importlib.util.find_spec(f"{name}.apps") is not None
            or importlib.util.find_spec(f"{name}.models") is not None
        )
    except ModuleNotFoundError:
        return False


def _check_jobs(page: Page, value: Any) -> list[str]:
    from django.test import override_settings

    from django_jobs import checks

    with override_settings(JOBS=value):
        return [f"JOBS: {error.msg} ({error.id})" for error in checks.check_jobs_settings()]


def _check_databases(page: Page, value: Any) -> list[str]:
    from django.db.utils import ConnectionHandler

    handler = ConnectionHandler(value)
    problems = []
    for alias in value:
        connection = handler[alias]
        try:
            connection.ensure_connection()
        except Exception as exc:
            problems.append(f"DATABASES[{alias!r}] does not connect: {exc!r}")
        finally:
            connection.close()
            if hasattr(connection, "close_pool"):  # PostgreSQL, Django 5.1+: the pool's threads
                connection.close_pool()
    return problems


def _check_backend(setting: str, key: str = "BACKEND") -> Callable[[Page, Any], list[str]]:
    def check(page: Page, value: Any) -> list[str]:
        from django.utils.module_loading import import_string

        problems = []
        for alias, config in value.items():
            try:
                import_string(config[key])
            except ImportError as exc:
                problems.append(f"{setting}[{alias!r}][{key!r}]: {exc}")
        return problems

    return check


def _check_channel_layers(page: Page, value: Any) -> list[str]:
    from django.utils.module_loading import import_string

    problems = []
    for alias, config in value.items():
        try:
            import_string(config["BACKEND"])(**config.get("CONFIG", {}))
        except Exception as exc:
            problems.append(f"CHANNEL_LAYERS[{alias!r}]: {exc!r}")
    return problems


def _check_eventstream_redis(page: Page, value: Any) -> list[str]:
    import redis

    try:
        redis.Redis(**value)  # connects on first use only
    except Exception as exc:
        return [f"EVENTSTREAM_REDIS: {exc!r}"]
    return []


def _check_tasks(page: Page, value: Any) -> list[str]:
    from django.utils.module_loading import import_string

    problems = []
    for alias, config in value.items():
        try:
            backend = import_string(config["BACKEND"])(alias, config)
            problems += [f"TASKS[{alias!r}]: {e.msg}" for e in backend.check() if e.is_serious()]
        except Exception as exc:
            problems.append(f"TASKS[{alias!r}]: {exc!r}")
    return problems


SETTING_CHECKS: dict[str, Callable[[Page, Any], list[str]]] = {
    "INSTALLED_APPS": _check_installed_apps,
    "JOBS": _check_jobs,
    "DATABASES": _check_databases,
    "CHANNEL_LAYERS": _check_channel_layers,
    "EVENTSTREAM_REDIS": _check_eventstream_redis,
    "TASKS": _check_tasks,
}


def _check_urlpatterns(patterns: Any) -> list[str]:
    from django.core.checks.urls import check_resolver
    from django.urls import URLPattern, URLResolver
    from django.urls.resolvers import RegexPattern

    entries = [entry for entry in patterns if entry is not Ellipsis]
    problems = [
        f"urlpatterns: {entry!r} is not a path()"
        for entry in entries
        if not isinstance(entry, URLPattern | URLResolver)
    ]
    if not problems:
        resolver = URLResolver(RegexPattern(r"^/"), entries)
        problems = [f"urlpatterns: {e.msg}" for e in check_resolver(resolver) if e.is_serious()]
    return problems
