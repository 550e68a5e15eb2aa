"""A learning-rate schedule with asynchronous parameter servers (as word2vec's program):
one weight w (initial 1), loss = mean(w * x) with x = 1, so each step's gradient is 1 and
the update is exactly the rate applied.  SGD with exponential_decay(0.1, 5 steps, 0.5,
staircase).  Each worker prints the rate of each step; the first saves an inference model
(the servers' w) after the last step.  MODE: async or half_async."""
import os
import sys

import numpy as np

import fleet_c.fluid as fluid
from fleet_c.fluid.incubate.fleet.parameter_server.distribute_transpiler import fleet
from fleet_c.fluid.transpiler.distribute_transpiler.distributed_strategy import StrategyFactory

steps = int(os.environ.get("STEPS", "12"))
fleet.init()
x = fluid.layers.data(name="x", shape=[1], dtype="float32")
pred = fluid.layers.fc(input=x, size=1, bias_attr=False,
                       param_attr=fluid.ParamAttr(name="w", initializer=fluid.initializer.Constant(1.0)))
loss = fluid.layers.mean(pred)
opt = fluid.optimizer.SGD(learning_rate=fluid.layers.exponential_decay(learning_rate=0.1, decay_steps=5,
                                                                         decay_rate=0.5, staircase=True))
strategy = (StrategyFactory.create_half_async_strategy() if os.environ.get("MODE") == "half_async"
            else StrategyFactory.create_async_strategy())
fleet.distributed_optimizer(opt, strategy).minimize(loss)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
    sys.exit(0)
exe = fluid.Executor(fluid.CPUPlace())
fleet.init_worker()
exe.run(fleet.startup_program)
lr_name = [v.name for v in fleet.main_program.list_vars() if v.name.startswith("learning_rate")][0]
for step in range(steps):
    lr, = exe.run(fleet.main_program, feed={"x": np.ones((1, 1), np.float32)}, fetch_list=[lr_name])
    print("worker %d step %d lr %.9g" % (fleet.worker_index(), step, float(lr)))
fleet.barrier_worker()
if fleet.is_first_worker():
    fleet.save_inference_model(exe, "model", ["x"], [pred])
fleet.barrier_worker()
fleet.stop_worker()
