"""The package version, in a module of its own so that anything may import it without importing
the package's ``__init__`` (which re-exports the whole API)."""

__version__ = "0.1.0"
