"""``python -m confide.cli``."""

from confide.cli import main

main()
