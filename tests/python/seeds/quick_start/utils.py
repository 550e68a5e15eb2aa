# gen_data() of the quick-start programs (the seed's utils.py, not shown in the seed).  The
# seed draws random labels; these follow a rule the MLP can learn (label 1 when the first 16
# features add up to more than the last 16), so a test can see the cost fall.
import numpy as np


def gen_data():
    x = np.random.random(size=(128, 32)).astype('float32') * 2 - 1
    y = (x[:, :16].sum(axis=1) > x[:, 16:].sum(axis=1)).astype('int64').reshape(128, 1)
    return {"x": x, "y": y}
