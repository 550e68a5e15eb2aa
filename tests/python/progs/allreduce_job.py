"""layers.collective._c_allreduce and _c_allgather in a program of its own (as Paddle's dist_test evaluates
accuracy over the trainers): each worker feeds its rank + 1 and prints the sums and maxima."""
import numpy as np

import fleet_c.fluid as fluid
from fleet_c.fluid.incubate.fleet.base import role_maker
from fleet_c.fluid.incubate.fleet.collective import fleet

fleet.init(role_maker.PaddleCloudRoleMaker(is_collective=True))
rank = fleet.worker_index()
prog = fluid.Program()
with fluid.program_guard(prog):
    value = fluid.layers.data(name="value", shape=[2], dtype="float32")
    s = fluid.layers.collective._c_allreduce(value, reduce_type="sum", use_calc_stream=True)
    m = fluid.layers.collective._c_allreduce(value, reduce_type="max")
    g = fluid.layers.collective._c_allgather(value, fleet.worker_num())
exe = fluid.Executor(fluid.CPUPlace())
for step in range(3):
    # step 0 feeds one sample without its batch dimension (as dist_test feeds its metrics)
    v = np.full((1, 2) if step else (2,), rank + 1 + step, np.float32)
    got_s, got_m, got_g = exe.run(prog, feed={"value": v}, fetch_list=[s, m, g])
    print("rank %d step %d sum %s max %s" % (rank, step, got_s.ravel().tolist(), got_m.ravel().tolist()))
    print("rank %d step %d gather %s %s" % (rank, step, list(got_g.shape), got_g.ravel().tolist()))
