"""Every command of the project reads its options as written, never abbreviated.

argparse takes a prefix of a long option for the option (``--sett=x`` for ``--settings``,
``--conc`` for ``--concurrency``) unless ``allow_abbrev`` is off; Django's ``BaseCommand``
leaves it on. A mistyped or shortened option could then silently set another one, or be
accepted and ignored. ``ExactOptions`` turns it off on the command's parser and on every
subcommand's, so a shortened option is a usage error naming it.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser


def no_abbreviations(parser: argparse.ArgumentParser) -> None:
    """``allow_abbrev = False`` on ``parser`` and on its subcommands' parsers, all the way
    down (argparse reads it when it parses)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                no_abbreviations(sub)


class ExactOptions:
    """Mixed into a ``BaseCommand``: its options, and its subcommands', are never taken from
    an abbreviation."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser: CommandParser = super().create_parser(  # type: ignore[misc]
            prog_name, subcommand, allow_abbrev=False, **kwargs
        )
        no_abbreviations(parser)
        return parser
