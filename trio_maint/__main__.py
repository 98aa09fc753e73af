"""``python -m trio_maint``: the ``trio-maint`` command line."""

from __future__ import annotations

import sys

from ._cli.main import main

if __name__ == "__main__":
    sys.exit(main())
