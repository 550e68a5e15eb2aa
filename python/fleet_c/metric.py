"""paddle.metric on static programs."""
from .layers import accuracy as _accuracy
from .layers import auc  # noqa: F401


def accuracy(input, label, k=1, correct=None, total=None, name=None):
    """Top-k accuracy of scores [N, C] (probabilities or logits) against int64 labels [N, 1]."""
    return _accuracy(input, label, k, correct, total)
