"""Weight decay (fluid.regularizer and paddle.regularizer names).

L2 decay adds coeff * param to each gradient (for sparse gradients only on the touched
rows).  The C library implements L2 only; L1Decay is refused when used.
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
    """The L2 coefficient of a regularizer, a float weight_decay, or None -> 0."""
    if reg is None:
        return 0.0
    if isinstance(reg, (int, float)):
        return float(reg)
    if isinstance(reg, L1Decay):
        raise NotImplementedError("%s: L1Decay is not supported (Fleet implements L2 decay only)" % what)
    if isinstance(reg, WeightDecayRegularizer):
        return reg.coeff
    raise TypeError("%s: expected L2Decay or a float, got %s" % (what, type(reg).__name__))
