"""ParamAttr: a parameter's name, initializer, learning-rate scale, regularizer and
whether it is trained (fluid.ParamAttr, paddle.ParamAttr)."""
from . import _lib
from .initializer import Initializer
from .regularizer import l1_coeff, l2_coeff


class ParamAttr:
    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None, trainable=True,
                 do_model_average=False, need_clip=True):
        self.name = name
        self.initializer = initializer
        self.learning_rate = learning_rate
        self.regularizer = regularizer
        self.trainable = trainable

    @staticmethod
    def _to_attr(arg):
        """None, a name, an Initializer or a ParamAttr -> ParamAttr; False stays False
        (no bias)."""
        if arg is None or arg is True:
            return ParamAttr()
        if arg is False:
            return False
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise TypeError("expected a ParamAttr, a name, an initializer or None, got %s" % type(arg).__name__)

    def _c(self, default_init=None):
        """The C fl_param_attr (its name bytes are kept alive by the struct)."""
        init = self.initializer if self.initializer is not None else default_init
        c = _lib.ParamAttr()
        c.name = _lib.cstr(self.name)
        if init is not None:
            c.init = init._c()
        lr = float(self.learning_rate)
        c.learning_rate = lr if lr not in (0.0, 1.0) else 0.0  # 0 in C means 1
        c.l2_decay = l2_coeff(self.regularizer, "ParamAttr(%s)" % (self.name or ""))
        c.l1_decay = l1_coeff(self.regularizer)
        c.frozen = 0 if self.trainable and lr != 0.0 else 1
        return c

