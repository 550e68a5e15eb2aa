"""paddle.distributed.fleet.utils: DistributedInfer (ps_util)."""
from .ps_util import DistributedInfer  # noqa: F401

__all__ = ["DistributedInfer"]
