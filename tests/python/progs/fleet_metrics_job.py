"""paddle.distributed.fleet.metrics among the workers of a collective job: worker r holds
r + 1 (arrays, and a scope variable "stat" made by create_global_var) and prints what
sum / max / min / acc / mae / mse / rmse return."""
import numpy as np

import fleet_c as paddle
import fleet_c.static as static
from fleet_c.distributed import fleet

fleet.init(is_collective=True)
r = fleet.worker_index()
main, startup = static.Program(), static.Program()
with static.program_guard(main, startup):
    static.create_global_var([2], float(r + 1), "float32", persistable=True, name="stat")
static.Executor(paddle.CPUPlace()).run(startup)
m = fleet.metrics
v = np.array([r + 1.0, -(r + 1.0)], np.float32)
print("rank %d sum %s max %s min %s stat %s" % (r, m.sum(v).tolist(), m.max(v).tolist(), m.min(v).tolist(),
                                                 m.sum("stat").tolist()))
print("rank %d acc %.6f mae %.6f mse %.6f rmse %.6f" % (r, m.acc(np.array([r + 1]), np.array([10])),
                                                       m.mae(np.array([r + 1.0]), 4.0),
                                                       m.mse(np.array([r + 1.0]), 4.0),
                                                       m.rmse(np.array([r + 1.0]), 4.0)))
