"""paddle.nn.initializer names."""
from ..initializer import (Constant, Initializer, Normal, TruncatedNormal, Uniform, XavierNormal,  # noqa: F401
                           XavierUniform)
