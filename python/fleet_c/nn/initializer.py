"""paddle.nn.initializer names."""
from ..initializer import (Assign, Constant, Initializer, Normal, TruncatedNormal, Uniform,  # noqa: F401
                           XavierNormal, XavierUniform)
