"""Metrics files (include/fleet/metrics.h) read back by TensorBoard itself: the CTR example
trains with --metrics_dir (one local process) and with FLEET_METRICS_DIR under fleetrun
(two workers: one run per rank), and TensorBoard's EventAccumulator must list the scalars
the CSV files hold; scripts/plot-metrics.sh draws them."""
import csv
import math
import os
import subprocess

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers import fleetrun, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--sparse_feature_dim", "10001", "--hidden", "16,16", "--batch_size", "50", "--print_period", "10",
         "--optimizer", "adam", "--lr", "0.005"]


def _data(tmp_path, build_dir, env):
    run([os.path.join(build_dir, "tools", "fleet-datagen"), "criteo", "--rows", "4000", "--files", "2", "--out",
         str(tmp_path / "data"), "--seed", "2", "--vocab-scale", "0.002", "--dense-scale", "0.1"], tmp_path, env)
    return ["--train_data", str(tmp_path / "data" / "train"), "--test_data", str(tmp_path / "data" / "test")]


def _csv(path):
    """{tag: [(epoch, step, value), ...]} of one rank's CSV file."""
    out = {}
    with open(str(path)) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        out.setdefault(r["tag"], []).append((int(r["epoch"]), int(r["step"]), float(r["value"])))
    return out, {int(r["rank"]) for r in rows}


def _events(path):
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def _same(acc, table, tag):
    """TensorBoard's points of tag are the CSV's (steps exactly, values as float32)."""
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    want = [(s, v) for _, s, v in table[tag]]
    assert [s for s, _ in got] == [s for s, _ in want], tag
    for (_, a), (_, b) in zip(got, want):
        assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6), (tag, a, b)


def test_local_run_scalars_in_tensorboard_and_csv(tmp_path, build_dir, env):
    d = tmp_path / "metrics"
    run([os.path.join(build_dir, "examples", "ctr", "train"), "--is_local", "1", "--epochs", "2", "--thread_num", "2",
         "--model_dir", str(tmp_path / "model"), "--metrics_dir", str(d)] + SMALL + _data(tmp_path, build_dir, env),
        tmp_path, env)
    table, ranks = _csv(d / "metrics.rank0.csv")
    assert ranks == {0}
    acc = _events(d / "rank0")
    tags = set(acc.Tags()["scalars"])
    want = {"loss", "auc", "examples_per_s", "lr", "epoch/loss", "epoch/auc", "epoch/examples_per_s", "epoch/lr",
            "infer/auc"}
    assert want <= tags, sorted(tags)
    for t in want:
        _same(acc, table, t)
    # a record every 10 batches of the process, the step going on across epochs
    steps = [s for _, s, _ in table["loss"]]
    assert len(steps) >= 8 and steps == [10 * i for i in range(1, len(steps) + 1)], steps
    assert {e for e, _, _ in table["loss"]} == {0, 1}
    assert [(e, s) for e, s, _ in table["epoch/loss"]] == [(0, 0), (1, 1)]
    # the loss is a mean per example (a log-loss of clicks: well under 1), and falls
    losses = [v for _, _, v in table["epoch/loss"]]
    assert 0 < losses[1] < losses[0] < 1, losses
    assert all(abs(v - 0.005) < 1e-6 for _, _, v in table["lr"])
    # the plot
    png = tmp_path / "m.png"
    out = subprocess.run([os.path.join(ROOT, "scripts", "plot-metrics.sh"), str(d), str(png)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
    assert out.stdout.strip() == str(png)
    with open(str(png), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_parameter_server_workers_write_one_run_per_rank(tmp_path, build_dir, env):
    d = tmp_path / "metrics"
    e = dict(env, FLEET_METRICS_DIR=str(d))
    run([fleetrun(build_dir), "--server_num", "1", "--worker_num", "2", "--log_dir", str(tmp_path / "log"),
         os.path.join(build_dir, "examples", "ctr", "train"), "--epochs", "2", "--thread_num", "1",
         "--model_dir", str(tmp_path / "model")] + SMALL + _data(tmp_path, build_dir, env), tmp_path, e)
    for r in (0, 1):
        table, ranks = _csv(d / ("metrics.rank%d.csv" % r))
        assert ranks == {r}
        acc = _events(d / ("rank%d" % r))
        tags = set(acc.Tags()["scalars"])
        assert {"loss", "auc", "epoch/loss", "epoch/auc", "epoch/examples_per_s"} <= tags, sorted(tags)
        # the servers run the optimizer: a worker has no learning rate to report
        assert "lr" not in tags and "epoch/lr" not in tags
        _same(acc, table, "epoch/loss")
        assert [e for e, _, _ in table["epoch/loss"]] == [0, 1]
    assert not os.path.exists(str(d / "metrics.rank2.csv"))
