"""paddle.metric on static programs: the accuracy / auc layers, and the Accuracy and Auc
classes (compute() builds the ops of a batch in the current program; update() takes the
fetched values; accumulate() gives the metric so far)."""
import numpy as np

from .fluid.metrics import _AucProgram
from .layers import accuracy as _accuracy
from .layers import auc  # noqa: F401

__all__ = ["accuracy", "auc", "Metric", "Accuracy", "Auc"]


def accuracy(input, label, k=1, correct=None, total=None, name=None):
    """Top-k accuracy of scores [N, C] (probabilities or logits) against int64 labels [N, 1]."""
    return _accuracy(input, label, k, correct, total)


class Metric:
    def __init__(self, name=None):
        self._name = name or type(self).__name__.lower()

    def name(self):
        return self._name

    def reset(self):
        raise NotImplementedError

    def update(self, *args):
        raise NotImplementedError

    def accumulate(self):
        raise NotImplementedError

    def compute(self, *args):
        return args


class Accuracy(Metric):
    """paddle.metric.Accuracy(topk=(1,)): compute(pred, label) appends top-k and equal ops
    (float32 [N, maxk]: 1 where the label is the j-th best); update(correct) takes its
    fetched value and returns the batch's accuracies; accumulate() the ones so far."""

    def __init__(self, topk=(1,), name=None):
        super().__init__(name or "acc")
        self.topk = tuple(topk)
        self.maxk = max(self.topk)
        self.reset()

    def compute(self, pred, label, *args):
        from . import layers
        _, idx = layers.topk(pred, self.maxk)
        return layers.cast(layers.equal(idx, label), "float32")

    def update(self, correct, *args):
        c = np.asarray(correct)
        accs = []
        for i, k in enumerate(self.topk):
            num = float(c[..., :k].sum())
            self.total[i] += num
            self.count[i] += c.shape[0]
            accs.append(num / c.shape[0] if c.shape[0] else 0.0)
        return accs[0] if len(self.topk) == 1 else accs

    def reset(self):
        self.total = [0.0] * len(self.topk)
        self.count = [0] * len(self.topk)

    def accumulate(self):
        res = [t / c if c else 0.0 for t, c in zip(self.total, self.count)]
        return res[0] if len(self.topk) == 1 else res


class Auc(Metric):
    """paddle.metric.Auc(curve='ROC', num_thresholds=4095): update(preds, labels) with preds
    [N, 2] (or positive probabilities [N]), accumulate() the AUC so far, computed by the C
    auc op (see fluid.metrics.Auc)."""

    def __init__(self, curve="ROC", num_thresholds=4095, name=None):
        super().__init__(name or "auc")
        if curve != "ROC":
            raise NotImplementedError("Auc: curve=%r is not supported (ROC only)" % curve)
        self._num_thresholds = int(num_thresholds)
        self.reset()

    def update(self, preds, labels):
        self._prog.update(preds, labels)

    def reset(self):
        self._prog = _AucProgram(self._num_thresholds)

    def accumulate(self):
        return self._prog.value
