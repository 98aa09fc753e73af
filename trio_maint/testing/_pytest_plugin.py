"""pytest plugin (entry point ``pytest11``) providing trio_maint's fixtures."""

from __future__ import annotations
