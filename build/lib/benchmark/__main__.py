"""``python -m benchmark``: see :mod:`benchmark.cli`."""

from benchmark.cli import main

raise SystemExit(main())
