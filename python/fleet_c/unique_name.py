"""fluid.unique_name: generate(key) -> "key_0", "key_1", ...; guard() starts a fresh
numbering inside it (Paddle programs build a test program under guard() so its names match
the training program's).  The library names a program's own variables per program, so
two programs built the same way already get the same names."""
import contextlib

__all__ = ["generate", "guard", "switch"]

_counters = {}


def generate(key):
    n = _counters.get(key, 0)
    _counters[key] = n + 1
    return "%s_%d" % (key, n)


def switch(new_generator=None):
    """Replaces the numbering (a dict, or a fresh one when None); returns the old one."""
    global _counters
    old, _counters = _counters, (new_generator if new_generator is not None else {})
    return old


@contextlib.contextmanager
def guard(new_generator=None):
    if isinstance(new_generator, str):  # Paddle's guard("prefix"): a fresh numbering all the same
        new_generator = None
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
