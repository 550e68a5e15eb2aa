"""paddle.nn layers in static programs: nn.Layer subclasses whose forward() appends the C
library's ops to the current main program (dynamic-graph training is not supported).

A layer creates its parameters when it is constructed, in the current main program (named
as Paddle names them: linear_0.w_0, embedding_0.w_0, conv2d_0.w_0, batch_norm_0.w_0 ...),
so model.parameters() can be given to an optimizer before or after the first forward; each
forward() builds ops that read those same parameters (the C layer builders share a
parameter named again).  Calling a layer twice builds its ops twice over one set of
parameters.  train() / eval() switch dropout between its training and inference forms for
the ops built afterwards (Program.clone(for_test=True) switches the ones already built).
"""
import collections

from .. import layers as _L
from .. import unique_name
from ..framework import Variable
from ..initializer import Constant, Normal
from ..param_attr import ParamAttr

__all__ = ["Layer", "Linear", "Embedding", "Conv2D", "Conv2DTranspose", "BatchNorm2D", "BatchNorm1D", "BatchNorm", "ReLU", "Sigmoid",
           "Tanh", "Softmax", "Dropout", "Flatten", "MaxPool2D", "AvgPool2D", "Sequential", "LayerList",
           "CrossEntropyLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss", "LayerNorm"]


class Layer:
    """paddle.nn.Layer: sublayers and parameters assigned as attributes are registered;
    __call__ runs forward()."""

    def __init__(self, name_scope=None, dtype="float32"):
        self.__dict__["_parameters"] = collections.OrderedDict()
        self.__dict__["_sub_layers"] = collections.OrderedDict()
        self.training = True
        self._dtype = dtype
        self._full_name = unique_name.generate(name_scope or type(self).__name__.lower())

    def full_name(self):
        return self._full_name

    def __setattr__(self, name, value):
        subs = self.__dict__.get("_sub_layers")
        if subs is None:
            raise RuntimeError("%s: call super().__init__() before assigning attributes" % type(self).__name__)
        if isinstance(value, Layer):
            subs[name] = value
        elif isinstance(value, Variable) and value.is_parameter:
            self._parameters[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("%s.forward is not defined" % type(self).__name__)

    def create_parameter(self, shape, attr=None, dtype=None, is_bias=False, default_initializer=None):
        """A parameter of the current main program (bias: initialised to 0 by default)."""
        if attr is False:
            return None
        pa = ParamAttr._to_attr(attr)
        init = default_initializer if default_initializer is not None else (Constant(0.0) if is_bias else None)
        return _L.create_parameter(list(shape), dtype or self._dtype, attr=pa, default_initializer=init)

    def add_sublayer(self, name, sublayer):
        setattr(self, name, sublayer)
        return sublayer

    def add_parameter(self, name, parameter):
        setattr(self, name, parameter)
        return parameter

    def sublayers(self, include_self=False):
        out = [self] if include_self else []
        for s in self._sub_layers.values():
            out += s.sublayers(include_self=True)
        return out

    def named_parameters(self, prefix=""):
        for n, p in self._parameters.items():
            yield (prefix + "." + n if prefix else n), p
        for sn, s in self._sub_layers.items():
            yield from s.named_parameters(prefix + "." + sn if prefix else sn)

    def parameters(self, include_sublayers=True):
        if not include_sublayers:
            return list(self._parameters.values())
        seen, out = set(), []
        for _, p in self.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    def children(self):
        return iter(self._sub_layers.values())

    def train(self):
        for s in self.sublayers(include_self=True):
            s.training = True
        return self

    def eval(self):
        for s in self.sublayers(include_self=True):
            s.training = False
        return self


def _named(layer, kind, attr, suffix):
    """attr with Paddle's parameter name (<kind>_<k>.<suffix>) unless it names one itself."""
    pa = ParamAttr._to_attr(attr)
    if pa is False or pa.name:
        return pa
    return ParamAttr(name="%s.%s" % (layer._pname, suffix), initializer=pa.initializer,
                     learning_rate=pa.learning_rate, regularizer=pa.regularizer, trainable=pa.trainable)


class Linear(Layer):
    """y = x W + b, W [in_features, out_features] (matmul_v2 + elementwise_add, as Paddle)."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        self._pname = name or unique_name.generate("linear")
        self.weight = self.create_parameter([in_features, out_features], _named(self, "linear", weight_attr, "w_0"))
        self.bias = self.create_parameter([out_features], _named(self, "linear", bias_attr, "b_0"), is_bias=True)

    def forward(self, x):
        out = _L.matmul_v2(x, self.weight)
        return _L.elementwise_add(out, self.bias) if self.bias is not None else out


class Embedding(Layer):
    """Rows of weight [num_embeddings, embedding_dim] at int64 ids of any shape ([..., 1] or
    [...]): the output has the ids' shape (a last dim of 1 dropped) plus embedding_dim."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, sparse=False, weight_attr=None, name=None):
        super().__init__()
        self._pname = name or unique_name.generate("embedding")
        self._size = [int(num_embeddings), int(embedding_dim)]
        self._padding_idx, self._sparse = padding_idx, bool(sparse)
        self._attr = _named(self, "embedding", weight_attr, "w_0")
        self.weight = self.create_parameter(self._size, self._attr)

    def forward(self, x):
        shape = list(x.shape)
        ids = x if shape and shape[-1] == 1 else _L.reshape(x, [-1, 1])
        out = _L.embedding(ids, self._size, is_sparse=self._sparse, padding_idx=self._padding_idx,
                           param_attr=self._attr)
        if ids is x:
            return out
        return _L.reshape(out, [-1] + [int(d) for d in shape[1:]] + [self._size[1]])


class Conv2D(Layer):
    """NCHW convolution (conv2d op); weight [out, in / groups, kh, kw] initialised as Paddle's
    Conv2D: Normal(0, sqrt(2 / (kh kw in)))."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros", weight_attr=None, bias_attr=None, data_format="NCHW"):
        super().__init__()
        if padding_mode != "zeros" or data_format != "NCHW":
            raise NotImplementedError("Conv2D: padding_mode 'zeros' and data_format 'NCHW' only")
        kh, kw = _L._pair(kernel_size, "Conv2D", "kernel_size")
        self._pname = unique_name.generate("conv2d")
        self._args = (int(out_channels), (kh, kw), stride, padding, dilation, int(groups))
        std = (2.0 / (kh * kw * in_channels)) ** 0.5
        self._wattr = _named(self, "conv2d", weight_attr, "w_0")
        self._battr = _named(self, "conv2d", bias_attr, "b_0")
        self.weight = self.create_parameter([out_channels, in_channels // groups, kh, kw], self._wattr,
                                            default_initializer=Normal(0.0, std))
        self.bias = self.create_parameter([out_channels], self._battr, is_bias=True)

    def forward(self, x):
        out, k, stride, padding, dilation, groups = self._args
        return _L.conv2d(x, out, k, stride, padding, dilation, groups, param_attr=self._wattr,
                         bias_attr=self._battr if self.bias is not None else False)


class Conv2DTranspose(Layer):
    """NCHW transposed convolution (conv2d_transpose op); weight [in, out / groups, kh, kw]
    initialised as Paddle's Conv2DTranspose (Xavier over the filter's fans), bias [out];
    forward(x, output_size=None) as Paddle's."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 dilation=1, weight_attr=None, bias_attr=None, data_format="NCHW"):
        super().__init__()
        if data_format != "NCHW":
            raise NotImplementedError("Conv2DTranspose: data_format 'NCHW' only")
        if in_channels % groups or out_channels % groups:
            raise ValueError("Conv2DTranspose: in_channels %d and out_channels %d must be divisible by groups %d"
                             % (in_channels, out_channels, groups))
        kh, kw = _L._pair(kernel_size, "Conv2DTranspose", "kernel_size")
        self._pname = unique_name.generate("conv2d_transpose")
        self._args = (stride, padding, output_padding, int(groups), dilation, data_format)
        self.weight = self.create_parameter([in_channels, out_channels // groups, kh, kw],
                                            _named(self, "conv2d_transpose", weight_attr, "w_0"))
        self.bias = self.create_parameter([out_channels], _named(self, "conv2d_transpose", bias_attr, "b_0"),
                                          is_bias=True)

    def forward(self, x, output_size=None):
        from .functional import conv2d_transpose
        stride, padding, output_padding, groups, dilation, data_format = self._args
        return conv2d_transpose(x, self.weight, self.bias, stride, padding, output_padding, groups, dilation,
                                data_format, output_size)


class BatchNorm2D(Layer):
    """batch_norm over the channels (dim 1); momentum and epsilon as Paddle 2.x (0.9, 1e-5);
    in eval() mode (or use_global_stats) the moving statistics normalise."""

    def __init__(self, num_features, momentum=0.9, epsilon=1e-05, weight_attr=None, bias_attr=None,
                 data_format="NCHW", use_global_stats=None, name=None):
        super().__init__()
        if data_format not in ("NCHW", "NC", "NCL"):
            raise NotImplementedError("%s: data_format %r (channels first only)" % (type(self).__name__, data_format))
        self._pname = name or unique_name.generate("batch_norm")
        self._momentum, self._epsilon, self._global = float(momentum), float(epsilon), bool(use_global_stats)
        self._sattr = _named(self, "batch_norm", weight_attr, "w_0")
        self._battr = _named(self, "batch_norm", bias_attr, "b_0")
        self.weight = self.create_parameter([num_features], self._sattr, default_initializer=Constant(1.0))
        self.bias = self.create_parameter([num_features], self._battr, is_bias=True)

    def forward(self, x):
        return _L.batch_norm(x, is_test=not self.training, momentum=self._momentum, epsilon=self._epsilon,
                             param_attr=self._sattr, bias_attr=self._battr, moving_mean_name=self._pname + ".w_1",
                             moving_variance_name=self._pname + ".w_2", use_global_stats=self._global)


BatchNorm1D = BatchNorm2D


class BatchNorm(BatchNorm2D):
    """fluid.dygraph-style BatchNorm(num_channels, act=None, ...)."""

    def __init__(self, num_channels, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
                 bias_attr=None, dtype="float32", data_layout="NCHW", name=None, **kwargs):
        super().__init__(num_channels, momentum, epsilon, param_attr, bias_attr, data_layout, name=name)
        self._act = act

    def forward(self, x):
        return _L._act(super().forward(x), self._act, "BatchNorm")


class LayerNorm(Layer):
    """layer_norm over the trailing dims of normalized_shape (learned scale and shift)."""

    def __init__(self, normalized_shape, epsilon=1e-05, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        ns = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        self._n, self._epsilon = len(ns), float(epsilon)
        self._pname = name or unique_name.generate("layer_norm")
        self._sattr = _named(self, "layer_norm", weight_attr, "w_0")
        self._battr = _named(self, "layer_norm", bias_attr, "b_0")
        size = 1
        for d in ns:
            size *= int(d)
        self.weight = self.create_parameter([size], self._sattr, default_initializer=Constant(1.0))
        self.bias = self.create_parameter([size], self._battr, is_bias=True)

    def forward(self, x):
        return _L.layer_norm(x, begin_norm_axis=len(x.shape) - self._n, epsilon=self._epsilon,
                             param_attr=self._sattr, bias_attr=self._battr)


def _act_layer(name, fn):
    class Act(Layer):
        def __init__(self, *args, **kwargs):
            super().__init__()

        def forward(self, x):
            return fn(x)

    Act.__name__ = Act.__qualname__ = name
    return Act


ReLU = _act_layer("ReLU", lambda x: _L.relu(x))
Sigmoid = _act_layer("Sigmoid", lambda x: _L.sigmoid(x))
Tanh = _act_layer("Tanh", lambda x: _L.tanh(x))


class Softmax(Layer):
    def __init__(self, axis=-1, name=None):
        super().__init__()
        self._axis = axis

    def forward(self, x):
        return _L.softmax(x, axis=self._axis)


class Dropout(Layer):
    """Paddle 2.x's Dropout (mode upscale_in_train by default); eval() builds the inference
    form (nothing for upscale_in_train)."""

    def __init__(self, p=0.5, axis=None, mode="upscale_in_train", name=None):
        super().__init__()
        if axis is not None:
            raise NotImplementedError("Dropout: axis is not supported")
        self._p, self._mode = float(p), mode

    def forward(self, x):
        return _L.dropout(x, self._p, is_test=not self.training, dropout_implementation=self._mode)


class Flatten(Layer):
    """Flattens dims start_axis..stop_axis into one (a reshape; the batch dim stays)."""

    def __init__(self, start_axis=1, stop_axis=-1):
        super().__init__()
        self._start, self._stop = start_axis, stop_axis

    def forward(self, x):
        shape = list(x.shape)
        start = self._start % len(shape)
        stop = self._stop % len(shape)
        if start == 0:
            raise NotImplementedError("Flatten: start_axis 0 would merge the batch dimension")
        new = [0] * start + [-1] + [int(d) for d in shape[stop + 1:]]
        return _L.reshape(x, new)


class _Pool2D(Layer):
    def __init__(self, kind, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True):
        super().__init__()
        self._args = (kind, kernel_size, stride if stride is not None else kernel_size, padding, ceil_mode, exclusive)

    def forward(self, x):
        kind, k, s, p, ceil, excl = self._args
        return _L.pool2d(x, k, kind, s, p, ceil_mode=ceil, exclusive=excl)


class MaxPool2D(_Pool2D):
    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
                 name=None):
        if return_mask or data_format != "NCHW":
            raise NotImplementedError("MaxPool2D: return_mask and data_format other than NCHW are not supported")
        super().__init__("max", kernel_size, stride, padding, ceil_mode)


class AvgPool2D(_Pool2D):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCHW", name=None):
        if divisor_override is not None or data_format != "NCHW":
            raise NotImplementedError("AvgPool2D: divisor_override and data_format other than NCHW are not supported")
        super().__init__("avg", kernel_size, stride, padding, ceil_mode, exclusive)


class Sequential(Layer):
    def __init__(self, *layers):
        super().__init__()
        items = layers[0].items() if len(layers) == 1 and isinstance(layers[0], dict) else \
            [(str(i), l) for i, l in enumerate(layers)]
        for n, l in items:
            self.add_sublayer(n, l)

    def __getitem__(self, i):
        return list(self._sub_layers.values())[i]

    def __len__(self):
        return len(self._sub_layers)

    def forward(self, x):
        for l in self._sub_layers.values():
            x = l(x)
        return x


class LayerList(Layer):
    def __init__(self, sublayers=None):
        super().__init__()
        for l in sublayers or ():
            self.append(l)

    def append(self, sublayer):
        self.add_sublayer(str(len(self._sub_layers)), sublayer)
        return self

    def __getitem__(self, i):
        return list(self._sub_layers.values())[i]

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())


# ---- losses as layers ------------------------------------------------------------------------------


class CrossEntropyLoss(Layer):
    def __init__(self, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1, use_softmax=True,
                 name=None):
        super().__init__()
        self._kw = dict(weight=weight, ignore_index=ignore_index, reduction=reduction, soft_label=soft_label,
                        axis=axis, use_softmax=use_softmax)

    def forward(self, input, label):
        from . import functional
        return functional.cross_entropy(input, label, **self._kw)


def _loss_layer(name, fname):
    class Loss(Layer):
        def __init__(self, reduction="mean", name=None):
            super().__init__()
            self._reduction = reduction

        def forward(self, input, label):
            from . import functional
            return getattr(functional, fname)(input, label, reduction=self._reduction)

    Loss.__name__ = Loss.__qualname__ = name
    return Loss


MSELoss = _loss_layer("MSELoss", "mse_loss")
L1Loss = _loss_layer("L1Loss", "l1_loss")
BCEWithLogitsLoss = _loss_layer("BCEWithLogitsLoss", "binary_cross_entropy_with_logits")
