"""paddle.nn.functional on static programs."""
from .. import layers as _L

__all__ = ["cross_entropy", "softmax_with_cross_entropy", "relu", "tanh", "sigmoid", "softmax", "dropout",
           "embedding", "mse_loss", "l1_loss", "binary_cross_entropy_with_logits", "binary_cross_entropy",
           "square_error_cost", "linear", "one_hot", "gelu", "label_smooth", "normalize", "nll_loss",
           "conv2d_transpose"]


def _reduce(loss, reduction, what):
    if reduction == "mean":
        return _L.mean(loss)
    if reduction == "sum":
        return _L.reduce_sum(loss)
    if reduction == "none":
        return loss
    raise ValueError("%s: reduction must be 'mean', 'sum' or 'none', got %r" % (what, reduction))


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
    return _reduce(loss, reduction, "cross_entropy")


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
    """Rows of the parameter weight [vocab, dim] at int64 ids [..., 1] (the lookup names the
    parameter, so it reads that one)."""
    from ..param_attr import ParamAttr
    if not weight.is_parameter:
        raise TypeError("embedding: weight must be a parameter (create_parameter / nn.Embedding), got '%s'"
                        % weight.name)
    return _L.embedding(x, list(weight.shape), is_sparse=sparse, padding_idx=padding_idx,
                        param_attr=ParamAttr(name=weight.name))


def square_error_cost(input, label):
    return _L.square_error_cost(input, label)


def mse_loss(input, label, reduction="mean", name=None):
    """(input - label)^2 reduced (elementwise_sub, square, mean)."""
    return _reduce(_L.square_error_cost(input, label), reduction, "mse_loss")


def l1_loss(input, label, reduction="mean", name=None):
    return _reduce(_L.abs(_L.elementwise_sub(input, label)), reduction, "l1_loss")


def binary_cross_entropy_with_logits(logit, label, weight=None, reduction="mean", pos_weight=None, name=None):
    if weight is not None or pos_weight is not None:
        raise NotImplementedError("binary_cross_entropy_with_logits: weight and pos_weight are not supported")
    return _reduce(_L.sigmoid_cross_entropy_with_logits(logit, label), reduction, "binary_cross_entropy_with_logits")


def binary_cross_entropy(input, label, weight=None, reduction="mean", name=None):
    """-(label log(input) + (1 - label) log(1 - input)), built of log, scale and elementwise ops."""
    if weight is not None:
        raise NotImplementedError("binary_cross_entropy: weight is not supported")
    pos = _L.elementwise_mul(label, _L.log(input))
    neg = _L.elementwise_mul(_L.scale(label, -1.0, 1.0), _L.log(_L.scale(input, -1.0, 1.0)))
    return _reduce(_L.scale(_L.elementwise_add(pos, neg), -1.0), reduction, "binary_cross_entropy")


def linear(x, weight, bias=None, name=None):
    out = _L.matmul_v2(x, weight)
    return _L.elementwise_add(out, bias) if bias is not None else out


def one_hot(x, num_classes, name=None):
    return _L.one_hot(x, num_classes)


def gelu(x, approximate=False, name=None):
    return _L.gelu(x, approximate)


def label_smooth(label, prior_dist=None, epsilon=0.1, name=None):
    return _L.label_smooth(label, prior_dist, epsilon)


def normalize(x, p=2, axis=1, epsilon=1e-12, name=None):
    if p != 2:
        raise NotImplementedError("normalize: p=%r (the L2 norm only)" % p)
    return _L.l2_normalize(x, axis, epsilon)


def nll_loss(input, label, weight=None, ignore_index=-100, reduction="mean", name=None):
    """-input[i, label[i]] for log-probabilities input [N, C] and int64 labels [N] or [N, 1]:
    one_hot(label) times input, summed over the classes (C ops).  weight is not supported,
    and a label outside [0, C) (ignore_index included) fails in one_hot at run time."""
    if weight is not None:
        raise NotImplementedError("nll_loss: weight is not supported")
    if len(input.shape) != 2:
        raise ValueError("nll_loss: input must be [N, C] log-probabilities, got shape %s" % (list(input.shape),))
    if len(label.shape) == 1:
        from ..tensor_api import unsqueeze
        label = unsqueeze(label, 1)
    picked = _L.reduce_sum(_L.elementwise_mul(_L.one_hot(label, int(input.shape[1])), input), dim=1, keep_dim=True)
    return _reduce(_L.scale(picked, -1.0), reduction, "nll_loss")


def conv2d_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     data_format="NCHW", output_size=None, name=None):
    """Transposed convolution of x with the parameter weight [C, out / groups, kh, kw] (the
    op reads that parameter by name), plus bias [out] along dim 1 (elementwise_add)."""
    from ..layers_more import _conv2d_transpose
    from ..param_attr import ParamAttr
    if not weight.is_parameter or len(weight.shape) != 4:
        raise TypeError("conv2d_transpose: weight must be a 4-D parameter [C, out / groups, kh, kw], got '%s' %s"
                        % (weight.name, list(weight.shape)))
    if output_size is not None and output_padding not in (0, [0, 0], (0, 0)):
        raise ValueError("conv2d_transpose: output_padding option is mutually exclusive with output_size")
    groups = int(groups or 1)
    out = _conv2d_transpose("conv2d_transpose", x, int(weight.shape[1]) * groups, output_size,
                            [int(weight.shape[2]), int(weight.shape[3])], padding, stride, dilation, groups,
                            ParamAttr(name=weight.name), False, None, data_format, output_padding)
    return _L.elementwise_add(out, bias, axis=1) if bias is not None else out
