"""strategy.adaptive_localsgd in a Paddle 2.x static program: linear regression, each worker
on its own data; every step prints the loss, a checksum of the weights and the adaptive
state (k, the step of the last average)."""
import numpy as np

import fleet_c as paddle
import fleet_c.distributed.fleet as fleet
import fleet_c.fluid as fluid

paddle.enable_static()
fleet.init(is_collective=True)
rank = fleet.worker_index()
x = paddle.static.data(name="x", shape=[None, 4], dtype="float32")
y = paddle.static.data(name="y", shape=[None, 1], dtype="float32")
pred = paddle.static.nn.fc(x, 1)
loss = paddle.mean(fluid.layers.square(fluid.layers.elementwise_sub(pred, y)))
strategy = fleet.DistributedStrategy()
strategy.adaptive_localsgd = True
strategy.adaptive_localsgd_configs = {"init_k_steps": 4, "begin_step": 3}
opt = fleet.distributed_optimizer(paddle.optimizer.SGD(learning_rate=0.05), strategy)
opt.minimize(loss)
exe = paddle.static.Executor(paddle.CPUPlace())
exe.run(paddle.static.default_startup_program())
rng = np.random.RandomState(10 + rank)
true_w = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
params = [p.name for p in paddle.static.default_main_program().all_parameters()]
for step in range(1, 41):
    xb = rng.rand(8, 4).astype("float32")
    yb = (xb @ true_w + 0.3 * rank).astype("float32")
    cost, = exe.run(feed={"x": xb, "y": yb}, fetch_list=[loss])
    scope = fluid.global_scope()
    wsum = sum(float(np.array(scope.find_var(n).get_tensor()).sum()) for n in params)
    state = np.array(scope.find_var("@ADAPTIVE_LOCALSGD@").get_tensor())
    print("step %d loss %.9e wsum %.9e k %d last %d" % (step, float(cost), wsum, int(state[0]), int(state[1])))
