"""``python -m compress`` is the same as the ``bert-compress`` command."""

from compress.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
