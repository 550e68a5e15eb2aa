"""paddle.nn: layers (nn.Layer subclasses building ops in static programs), functional
layers and initializers.  Dynamic-graph training is not supported."""
from . import functional, initializer
from ..grad_clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # noqa: F401
from .layer import (AvgPool2D, BatchNorm, BatchNorm1D, BatchNorm2D, BCEWithLogitsLoss, Conv2D,  # noqa: F401
                    Conv2DTranspose, CrossEntropyLoss, Dropout, Embedding, Flatten, L1Loss, Layer, LayerList,
                    LayerNorm, Linear, MaxPool2D, MSELoss, ReLU, Sequential, Sigmoid, Softmax, Tanh)
from .layer import __all__ as _layers

__all__ = ["functional", "initializer", "ClipGradByValue", "ClipGradByNorm", "ClipGradByGlobalNorm"] + _layers
