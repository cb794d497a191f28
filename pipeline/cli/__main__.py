"""``python -m mongomem.cli``: the same as the ``mongomem`` command."""

from mongomem.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
