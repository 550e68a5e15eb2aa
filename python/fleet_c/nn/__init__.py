"""paddle.nn: functional layers and initializers (static programs only)."""
from . import functional, initializer

__all__ = ["functional", "initializer"]
