"""paddle.nn.functional on static programs."""
from .. import layers as _L

__all__ = ["cross_entropy", "softmax_with_cross_entropy", "relu", "tanh", "sigmoid", "softmax", "dropout",
           "embedding"]


def cross_entropy(input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                  use_softmax=True, name=None):
    """Softmax + cross entropy on logits (use_softmax=False: input already holds
    probabilities), reduced by 'mean' (a [1] loss, as Paddle 2.0), 'sum' or 'none'."""
    if weight is not None:
        raise NotImplementedError("cross_entropy: class weights are not supported")
    if use_softmax:
        loss = _L.softmax_with_cross_entropy(input, label, soft_label, ignore_index, axis=axis)
    else:
        loss = _L.cross_entropy(input, label, soft_label, ignore_index)
    if reduction == "mean":
        return _L.mean(loss)
    if reduction == "sum":
        return _L.reduce_sum(loss)
    if reduction == "none":
        return loss
    raise ValueError("cross_entropy: reduction must be 'mean', 'sum' or 'none', got %r" % reduction)


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    return _L.softmax_with_cross_entropy(logits, label, soft_label, ignore_index, numeric_stable_mode,
                                         return_softmax, axis)


def relu(x, name=None):
    return _L.relu(x)


def tanh(x, name=None):
    return _L.tanh(x)


def sigmoid(x, name=None):
    return _L.sigmoid(x)


def softmax(x, axis=-1, dtype=None, name=None):
    return _L.softmax(x, axis=axis)


def dropout(x, p=0.5, axis=None, training=True, mode="upscale_in_train", name=None):
    if axis is not None:
        raise NotImplementedError("dropout: axis is not supported")
    return _L.dropout(x, p, is_test=not training, dropout_implementation=mode)


def embedding(x, weight, padding_idx=None, sparse=False, name=None):
    raise NotImplementedError("nn.functional.embedding over a given weight is not supported; "
                              "use paddle.static.nn.embedding(input, size, ...)")
