"""fluid.metrics: accumulators of fetched values across batches (Paddle's are Python
objects too).  Accuracy keeps the weighted sum of batch accuracies and the total weight;
Auc feeds each batch of predictions through a small program holding the C auc op (its
threshold buckets accumulate in that program's scope), so the AUC is the op's."""
import numpy as np

__all__ = ["MetricBase", "Accuracy", "Auc"]


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


class _AucProgram:
    """A program of one auc op over fed predictions [N, 2] and int64 labels [N, 1], run in a
    scope of its own (the op's statistics persist there across update calls)."""

    def __init__(self, num_thresholds):
        from .. import executor, framework, layers
        self._main, startup = framework.Program(), framework.Program()
        self._scope = executor.Scope()
        with framework.program_guard(self._main, startup):
            pred = layers._data("predict", [None, 2], "float32", 0, True)
            label = layers._data("label", [None, 1], "int64", 0, True)
            self._auc, _, _ = layers.auc(pred, label, num_thresholds=num_thresholds)
        self._exe = executor.Executor()
        self._exe.run(startup, scope=self._scope)
        self.value = 0.0

    def update(self, preds, labels):
        p = np.asarray(preds, dtype=np.float32)
        if p.ndim == 1 or (p.ndim == 2 and p.shape[1] == 1):  # P(positive) only
            p = p.reshape(-1, 1)
            p = np.concatenate([1.0 - p, p], axis=1)
        l = np.asarray(labels).astype(np.int64).reshape(-1, 1)
        if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] != l.shape[0]:
            raise ValueError("Auc.update: preds must be [N, 2] (or [N] / [N, 1] positive probabilities) with N "
                             "labels, got %s and %d labels" % (p.shape, l.shape[0]))
        out = self._exe.run(self._main, feed={"predict": p, "label": l}, fetch_list=[self._auc], scope=self._scope)
        self.value = float(np.asarray(out[0]).reshape(-1)[0])


class Auc(MetricBase):
    """fluid.metrics.Auc(name, curve='ROC', num_thresholds=4095): update(preds, labels) with
    preds [N, 2] probabilities (column 1 positive) and labels [N, 1]; eval() the ROC AUC over
    every batch so far (0 before any), from the C auc op's buckets."""

    def __init__(self, name=None, curve="ROC", num_thresholds=4095):
        super().__init__(name)
        if curve != "ROC":
            raise NotImplementedError("Auc: curve=%r is not supported (ROC only)" % curve)
        self._num_thresholds = int(num_thresholds)
        self.reset()

    def reset(self):
        self._prog = _AucProgram(self._num_thresholds)

    def update(self, preds, labels):
        self._prog.update(preds, labels)

    def eval(self):
        return self._prog.value
