"""A Paddle 1.x program in the transpiler style (DistributeTranspiler), as its users wrote
them, with the imports of fleet_c: linear regression, one parameter server, trainers as
separate processes.  The environment says the role (TRAINING_ROLE, or MY_ROLE: then the
transpiler learns it from get_trainer_program / get_pserver_program), the servers
(PADDLE_PSERVERS), the trainers and this trainer's id; SYNC=0 trains asynchronously."""
import os

import numpy as np

import fleet_c.fluid as fluid

role = os.environ.get("TRAINING_ROLE") or os.environ["MY_ROLE"]
pservers = os.environ["PADDLE_PSERVERS"]
trainers = int(os.environ["PADDLE_TRAINERS_NUM"])
trainer_id = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
current = os.environ.get("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6174")
sync = os.environ.get("SYNC", "1") == "1"
steps = int(os.environ.get("STEPS", "150"))

x = fluid.layers.data(name="x", shape=[4], dtype="float32")
y = fluid.layers.data(name="y", shape=[1], dtype="float32")
pred = fluid.layers.fc(input=x, size=1, param_attr=fluid.ParamAttr(name="w"), bias_attr=fluid.ParamAttr(name="b"))
loss = fluid.layers.mean(fluid.layers.square(fluid.layers.elementwise_sub(pred, y)))
fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)

t = fluid.DistributeTranspiler()
t.transpile(trainer_id, pservers=pservers, trainers=trainers, sync_mode=sync, current_endpoint=current)
exe = fluid.Executor(fluid.CPUPlace())
if role == "PSERVER":
    prog = t.get_pserver_program(current)
    startup = t.get_startup_program(current, prog)
    exe.run(startup)
    exe.run(prog)
    print("pserver %s: done" % current)
else:
    prog = t.get_trainer_program()
    exe.run(fluid.default_startup_program())
    rng = np.random.RandomState(trainer_id)
    true_w = np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
    for step in range(steps):
        xb = rng.rand(16, 4).astype("float32")
        yb = (xb @ true_w + 0.3).astype("float32")
        cost, = exe.run(prog, feed={"x": xb, "y": yb}, fetch_list=[loss])
        print("trainer %d step %d loss %.6f" % (trainer_id, step, float(cost)))
    w = np.array(fluid.global_scope().find_var("w").get_tensor())
    print("trainer %d w %s" % (trainer_id, " ".join("%.6f" % v for v in w.ravel())))
    exe.close()
