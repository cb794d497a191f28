"""The options every command spells the same way, and the parser's error path.

``--project-id`` and ``--user-id`` are the one spelling of a project and a
user on every command; ``--project`` and ``--user`` (older spellings) still
work as hidden aliases. :func:`parse` reports an unrecognised argument with
the usage of the subcommand it was given to, not the top-level one.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

__all__ = ["add_project_id", "add_user_id", "aware_time", "parse", "subcommand_parser"]


def _add_id(
    parser: argparse.ArgumentParser,
    flag: str,
    old: str,
    *,
    required: bool,
    help_text: str,
    default: str | None = None,
) -> None:
    dest = flag.removeprefix("--").replace("-", "_")
    if required:
        either = parser.add_mutually_exclusive_group(required=True)
        either.add_argument(flag, dest=dest, help=help_text)
        either.add_argument(old, dest=dest, help=argparse.SUPPRESS)
        return
    parser.add_argument(flag, dest=dest, default=default, help=help_text)
    parser.add_argument(old, dest=dest, default=default, help=argparse.SUPPRESS)


def add_project_id(
    parser: argparse.ArgumentParser,
    *,
    required: bool = True,
    help_text: str = "the project to act on",
    default: str | None = None,
) -> None:
    """``--project-id`` (hidden alias ``--project``)."""
    _add_id(
        parser, "--project-id", "--project", required=required, help_text=help_text, default=default
    )


def add_user_id(
    parser: argparse.ArgumentParser,
    *,
    required: bool = True,
    help_text: str = "the end user to act for",
) -> None:
    """``--user-id`` (hidden alias ``--user``)."""
    _add_id(parser, "--user-id", "--user", required=required, help_text=help_text)


def aware_time(text: str) -> datetime:
    """An ISO time as an argument type; naive times are UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO time: {text!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def subcommand_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The deepest subcommand's parser that ``args`` went through (``mongomem memory list``)."""
    while (sub := _subparsers(parser)) is not None:
        chosen = getattr(args, sub.dest, None)
        if chosen is None or chosen not in sub.choices:
            break
        parser = sub.choices[chosen]
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an argument no parser knows fails with its subcommand's usage."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        subcommand_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args
