"""The ``confide`` command: parses options, calls :mod:`confide.api`, renders with Rich.

``ConfideError`` is caught only here and printed as ``Type: message`` with exit
code 1; Ctrl-C keeps what is stored and says how to resume.

One module per kind of command (``making``, ``reading``, ``deciding``, ``serving``,
``training``) registers on the one application of :mod:`confide.cli.app`.
"""

from __future__ import annotations

# Importing a command module registers its commands, in this order in `confide --help`.
# isort: off
from confide.cli import making, reading, serving, deciding, training  # noqa: F401
# isort: on
from confide.cli.app import app

__all__ = ["app", "main"]


def main() -> None:
    app()


if __name__ == "__main__":
    main()
