"""Gradient clipping given to an optimizer as grad_clip (fl_opt_set_grad_clip: minimize
appends the clip ops after backward, before the updates; dense float32 gradients only):
paddle.nn.ClipGradByValue / ClipGradByNorm / ClipGradByGlobalNorm and fluid 1.x's
fluid.clip.GradientClipByValue / GradientClipByNorm / GradientClipByGlobalNorm."""
from . import _lib
from ._lib import lib

__all__ = ["ClipGradByValue", "ClipGradByNorm", "ClipGradByGlobalNorm", "GradientClipByValue", "GradientClipByNorm",
           "GradientClipByGlobalNorm"]

_VALUE, _NORM, _GLOBAL_NORM = 1, 2, 3  # FL_CLIP_* (fleet/graph.h)


class ClipGradBase:
    def _apply(self, opt):
        _lib.check(lib.fl_opt_set_grad_clip(opt, self._kind, self._a, self._b))


class ClipGradByValue(ClipGradBase):
    """Each gradient element clamped to [min, max] (min defaults to -max)."""

    def __init__(self, max, min=None):
        max = float(max)
        min = -max if min is None else float(min)
        if not min < max:
            raise ValueError("ClipGradByValue: min %r must be less than max %r" % (min, max))
        self._kind, self._a, self._b = _VALUE, max, min


class ClipGradByNorm(ClipGradBase):
    """Each gradient scaled to an L2 norm of at most clip_norm."""

    def __init__(self, clip_norm):
        if not float(clip_norm) > 0:
            raise ValueError("ClipGradByNorm: clip_norm must be > 0, got %r" % (clip_norm,))
        self._kind, self._a, self._b = _NORM, float(clip_norm), 0.0


class ClipGradByGlobalNorm(ClipGradBase):
    """All gradients scaled by clip_norm / max(their global L2 norm, clip_norm)."""

    def __init__(self, clip_norm, group_name="default_group"):
        if not float(clip_norm) > 0:
            raise ValueError("ClipGradByGlobalNorm: clip_norm must be > 0, got %r" % (clip_norm,))
        self._kind, self._a, self._b = _GLOBAL_NORM, float(clip_norm), 0.0


GradientClipByValue = ClipGradByValue
GradientClipByNorm = ClipGradByNorm
GradientClipByGlobalNorm = ClipGradByGlobalNorm
