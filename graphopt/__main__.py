"""``python -m graphopt``: the command line (see ``graphopt.cli``)."""

from .cli import main

raise SystemExit(main())
