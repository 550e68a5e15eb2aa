"""fluid.DistributeTranspiler over the parameter-server runtime: a 1.x transpiler program
(progs/transpiler_job.py) run as its users run it, one parameter server and two trainers
as separate processes with the roles in the environment."""
import os
import re
import socket
import subprocess
import sys

import pytest

from helpers import costs

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "progs", "transpiler_job.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(env, tmp_path, role_var="TRAINING_ROLE", sync=True, trainers=2, steps=150):
    """Starts the server, then the trainers; returns {name: output} once all exited (each
    must exit 0)."""
    ep = "127.0.0.1:%d" % _free_port()
    base = dict(env, PADDLE_PSERVERS=ep, PADDLE_TRAINERS_NUM=str(trainers), SYNC="1" if sync else "0",
                STEPS=str(steps), FLEET_JOB_SECRET="0123456789abcdef" * 4)
    procs = {"pserver": subprocess.Popen([sys.executable, JOB], cwd=str(tmp_path), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True,
                                         env=dict(base, **{role_var: "PSERVER", "PADDLE_CURRENT_ENDPOINT": ep}))}
    for i in range(trainers):
        procs["trainer%d" % i] = subprocess.Popen(
            [sys.executable, JOB], cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=dict(base, **{role_var: "TRAINER", "PADDLE_TRAINER_ID": str(i)}))
    out = {}
    try:
        for name, p in procs.items():
            out[name] = p.communicate(timeout=120)[0]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    for name, p in procs.items():
        assert p.returncode == 0, "%s exited with %d:\n%s" % (name, p.returncode, out[name][-3000:])
    return out


def _w(text, i):
    m = re.search(r"trainer %d w ([-0-9. ]+)" % i, text)
    assert m, text[-2000:]
    return [float(v) for v in m.group(1).split()]


def test_sync_pserver_and_two_trainers_learn_the_same_model(env, tmp_path):
    """Sync mode: the server serves until both trainers have finished (exe.close()), the
    loss falls from its start to near 0, and both trainers end with the same parameters
    (the servers' after the last step), close to the planted ones."""
    out = _job(env, tmp_path)
    assert "done" in out["pserver"]
    for i in (0, 1):
        c = costs(out["trainer%d" % i], r"trainer %d step \d+ loss ([0-9.]+)" % i)
        assert len(c) == 150 and sum(c[:10]) / 10 > 0.5 and sum(c[-10:]) / 10 < 0.05, c[:3] + c[-3:]
    w0, w1 = _w(out["trainer0"], 0), _w(out["trainer1"], 1)
    assert w0 == w1
    assert all(abs(a - b) < 0.35 for a, b in zip(w0, [1.0, -2.0, 0.5, 3.0])), w0


def test_async_roles_from_the_get_calls(env, tmp_path):
    """No role variable that the transpiler reads: the role comes from get_trainer_program
    / get_pserver_program; asynchronous training learns too."""
    out = _job(env, tmp_path, role_var="MY_ROLE", sync=False)
    for i in (0, 1):
        c = costs(out["trainer%d" % i], r"trainer %d step \d+ loss ([0-9.]+)" % i)
        assert len(c) == 150 and sum(c[-10:]) < 0.5 * sum(c[:10]), c[:3] + c[-3:]  # stale pulls: slower


def test_transpile_errors_name_the_problem(env, tmp_path):
    """transpile before minimize, a pserver endpoint not in the list, a trainer id out of
    range: each raises saying so."""
    code = r'''
import fleet_c.fluid as fluid
x = fluid.layers.data(name="x", shape=[2], dtype="float32")
loss = fluid.layers.mean(fluid.layers.fc(input=x, size=1))
t = fluid.DistributeTranspiler()
t.transpile(0, pservers="127.0.0.1:1", trainers=1)
try:
    t.get_trainer_program()
except ValueError as e:
    print("E1", e)
t2 = fluid.DistributeTranspiler()
try:
    t2.transpile(3, pservers="127.0.0.1:1", trainers=2)
except ValueError as e:
    print("E2", e)
fluid.optimizer.SGD(0.1).minimize(loss)
t3 = fluid.DistributeTranspiler()
t3.transpile(0, pservers="127.0.0.1:1", trainers=1)
try:
    t3.get_pserver_program("127.0.0.1:2")
except ValueError as e:
    print("E3", e)
'''
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, FLEET_JOB_SECRET="ab" * 32), cwd=str(tmp_path),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert "E1 DistributeTranspiler: the program was not minimized" in p.stdout, p.stdout
    assert "E2 DistributeTranspiler.transpile: trainer_id 3 is not in [0, trainers=2)" in p.stdout, p.stdout
    assert "E3 DistributeTranspiler.get_pserver_program: endpoint '127.0.0.1:2' is not one of pservers" in p.stdout
