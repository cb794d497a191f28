"""The ``mongomem`` command's help and usage (issue 25): every command and option explained,
one spelling of every option, and a usage error shows the subcommand's usage."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from mongomem.cli.main import _parser, main


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))


def test_every_command_and_option_has_help() -> None:
    """``infra``, ``configure`` and the ``export`` options had none."""
    missing = []
    for path, parser in _walk(_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                missing += [f"{' '.join((*path, n))}" for n in action.choices if n not in helped]
                continue
            if not action.help:
                name = "/".join(action.option_strings) or action.dest
                missing.append(f"{' '.join(path) or 'mongomem'} {name}")
    assert missing == [], missing


def test_the_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    for name in ("env", "export", "import", "expire", "erase", "status", "keys", "spaces"):
        assert f"\n    {name} " in shown, name
    assert "resume" in shown  # erase resume


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}


def test_one_spelling_of_project_and_user() -> None:
    """``--user`` vs ``--user-id``, ``--project`` vs ``--project-id``: only the latter shown."""
    for path, parser in _walk(_parser()):
        shown = _options(parser)
        assert "--user" not in shown, path
        assert "--project" not in shown, path


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["export", "--project-id", "p", "--user", "u"], "user_id", "u"),
        (["export", "--project", "p", "--user-id", "u"], "project_id", "p"),
        (["keys", "list", "--project", "p"], "project_id", "p"),
        (["memory", "list", "--project-id", "p", "--user", "u"], "user_id", "u"),
    ],
)
def test_the_old_spellings_still_work(argv: list[str], dest: str, value: str) -> None:
    assert getattr(_parser().parse_args(argv), dest) == value


def test_an_unknown_argument_shows_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It printed the top-level usage."""
    with pytest.raises(SystemExit) as stopped:
        main(["memory", "list", "--project-id", "p", "--user-id", "u", "--bogus"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: mongomem memory list")
    assert "unrecognized arguments: --bogus" in err
