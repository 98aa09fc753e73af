"""``python -m trio_maint``: the ``trio-maint`` command line."""

from __future__ import annotations

from ._cli.main import main_entry

if __name__ == "__main__":
    main_entry()
