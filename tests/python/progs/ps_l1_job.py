"""L1Decay with parameter servers: two dense weights, "wp" (initial 0.5) and "wn"
(initial -0.5), and x = 0, so the data gradient is 0 and each step's update is exactly
the L1 term, rate * coeff * sign(w), computed on the worker from its copy of w and applied
by the servers.  SGD at 0.1 with regularization=L1Decay(0.05).  The first worker saves the
persistables (the servers' weights) after the last step.  MODE: sync or async; STEPS."""
import os
import sys

import numpy as np

import fleet_c.fluid as fluid
from fleet_c.fluid.incubate.fleet.parameter_server.distribute_transpiler import fleet
from fleet_c.fluid.transpiler.distribute_transpiler.distributed_strategy import StrategyFactory

steps = int(os.environ.get("STEPS", "8"))
fleet.init()
x = fluid.layers.data(name="x", shape=[4], dtype="float32")
pred = fluid.layers.elementwise_add(
    fluid.layers.fc(input=x, size=1, bias_attr=False,
                    param_attr=fluid.ParamAttr(name="wp", initializer=fluid.initializer.Constant(0.5))),
    fluid.layers.fc(input=x, size=1, bias_attr=False,
                    param_attr=fluid.ParamAttr(name="wn", initializer=fluid.initializer.Constant(-0.5))))
loss = fluid.layers.mean(pred)
opt = fluid.optimizer.SGD(learning_rate=0.1, regularization=fluid.regularizer.L1Decay(0.05))
strategy = (StrategyFactory.create_sync_strategy() if os.environ.get("MODE") == "sync"
            else StrategyFactory.create_async_strategy())
fleet.distributed_optimizer(opt, strategy).minimize(loss)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
    sys.exit(0)
exe = fluid.Executor(fluid.CPUPlace())
fleet.init_worker()
exe.run(fleet.startup_program)
for step in range(steps):
    exe.run(fleet.main_program, feed={"x": np.zeros((2, 4), np.float32)})
fleet.barrier_worker()
if fleet.is_first_worker():
    fleet.save_persistables(exe, "model")
fleet.barrier_worker()
fleet.stop_worker()
