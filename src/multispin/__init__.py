"""multispin: multi-access speculative inference at the wireless edge."""

__version__ = "0.1.0"
