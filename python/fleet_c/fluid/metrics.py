"""fluid.metrics: accumulators of fetched values across batches (Paddle's are Python
objects too).  Accuracy keeps the weighted sum of batch accuracies and the total weight."""
import numpy as np

__all__ = ["MetricBase", "Accuracy"]


class MetricBase:
    def __init__(self, name=None):
        self._name = name or type(self).__name__

    def reset(self):
        raise NotImplementedError

    def update(self, *args, **kwargs):
        raise NotImplementedError

    def eval(self):
        raise NotImplementedError


class Accuracy(MetricBase):
    """update(value, weight): a batch's accuracy and its number of examples; eval(): the
    accuracy over every batch so far."""

    def __init__(self, name=None):
        super().__init__(name)
        self.reset()

    def reset(self):
        self.value = 0.0
        self.weight = 0.0

    def update(self, value, weight):
        w = float(np.asarray(weight).reshape(-1)[0]) if np.ndim(weight) else float(weight)
        if w < 0:
            raise ValueError("Accuracy.update: weight must not be negative, got %r" % w)
        self.value += float(np.asarray(value).reshape(-1)[0]) * w
        self.weight += w

    def eval(self):
        if self.weight == 0:
            raise ValueError("Accuracy.eval: no batch was given (update() first)")
        return self.value / self.weight
