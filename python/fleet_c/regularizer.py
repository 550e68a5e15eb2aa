"""Weight decay (fluid.regularizer and paddle.regularizer names).

L2 decay adds coeff * param to each gradient (for sparse gradients only on the touched
rows), L1 decay coeff * sign(param) (fl_opt_set_l1, op l1_decay).  Given to an optimizer
they apply to every parameter; a ParamAttr's regularizer adds a coefficient of its own to
that parameter (fl_param_attr's l2_decay / l1_decay).
"""


class WeightDecayRegularizer:
    coeff = 0.0


class L2Decay(WeightDecayRegularizer):
    def __init__(self, regularization_coeff=0.0, coeff=None):
        self.coeff = float(regularization_coeff if coeff is None else coeff)

    def __repr__(self):
        return "L2Decay(%g)" % self.coeff


class L1Decay(WeightDecayRegularizer):
    def __init__(self, regularization_coeff=0.0, coeff=None):
        self.coeff = float(regularization_coeff if coeff is None else coeff)


L2DecayRegularizer = L2Decay
L1DecayRegularizer = L1Decay


def l2_coeff(reg, what):
    """The L2 coefficient of a regularizer, a float weight_decay, or None -> 0 (an L1Decay
    has none: see l1_coeff)."""
    if reg is None or isinstance(reg, L1Decay):
        return 0.0
    if isinstance(reg, (int, float)):
        return float(reg)
    if isinstance(reg, WeightDecayRegularizer):
        return reg.coeff
    raise TypeError("%s: expected L2Decay, L1Decay or a float, got %s" % (what, type(reg).__name__))


def l1_coeff(reg):
    """The L1 coefficient of an L1Decay, 0 otherwise."""
    return reg.coeff if isinstance(reg, L1Decay) else 0.0
