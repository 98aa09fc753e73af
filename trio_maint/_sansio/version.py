"""The package's version, in one place (the package and the exporters' meter and tracer
names read it)."""

__all__ = ["__version__"]

#: The version of this package (``str``), as in its metadata.
__version__ = "0.1.0"
