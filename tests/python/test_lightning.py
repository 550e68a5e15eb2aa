"""fleet_c.lightning, the seed's fleet_lightning: parse_train_configs, applications.Resnet50
and VGG16 built into the default program, model.load_imagenet_from_file(path) on a
`fleet-datagen images` set (Paddle's train.txt list and class folders), a short training run
reaching the set's printed ceiling, and the errors that name the argument."""
import os
import re
import subprocess

import numpy as np
import pytest

import fleet_c.fluid as fluid
import fleet_c.lightning as lightning
from fleet_c import FleetError


@pytest.fixture(scope="module")
def images(build_dir, tmp_path_factory):
    """fleet-datagen images: 4 classes, 640 train and 160 val images; (dir, val ceiling)."""
    out = str(tmp_path_factory.mktemp("images") / "d")
    tool = os.path.join(build_dir, "tools", "fleet-datagen")
    r = subprocess.run([tool, "images", "--out", out, "--train", "640", "--val", "160", "--classes", "4",
                        "--min-size", "32", "--max-size", "40", "--seed", "3"], capture_output=True, text=True)
    if r.returncode != 0 and "libjpeg-turbo" in r.stderr:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stderr
    ceiling = float(re.search(r"val +\d+ images +ceiling accuracy ([0-9.]+)", r.stdout).group(1))
    return out, ceiling


def test_parse_train_configs_reads_the_c_options():
    c = lightning.parse_train_configs(["--lr", "0.2", "--batch_size=16", "--image_size", "32"])
    assert c.lr == pytest.approx(0.2) and c.batch_size == 16 and c.image_size == 32
    assert c.momentum == pytest.approx(0.9) and c.decode_threads == 2 and c.bad_data == "stop"
    c.bad_data = "skip"
    assert c.bad_data == "skip"
    with pytest.raises(FleetError, match="nope"):
        lightning.parse_train_configs(["--nope", "1"])
    with pytest.raises(AttributeError, match="no option 'nope'"):
        c.nope


def test_resnet_trains_from_a_list_to_the_ceiling(images):
    d, ceiling = images
    configs = lightning.parse_train_configs(["--batch_size", "32", "--seed", "2"])
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        model = lightning.applications.Resnet50(configs, image_size=32, num_classes=4, depth=8, width=8)
        assert model.image.shape[1:] == (3, 32, 32) and model.predict.shape[1] == 4
        test_prog = main.clone(for_test=True)
        loader = model.load_imagenet_from_file(os.path.join(d, "train.txt"))
        assert len(loader) == 640 and loader.num_classes == 4
        opt = fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9)
        opt.minimize(model.loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = []
    for epoch in range(3):
        total, n = 0.0, 0
        for data in loader():
            assert data[model.image.name].shape[1:] == (3, 32, 32)
            loss, = exe.run(main, feed=data, fetch_list=[model.loss.name])
            total += float(np.asarray(loss).ravel()[0])
            n += 1
        assert n == 20
        losses.append(total / n)
    assert losses[-1] < losses[0]
    # evaluation: the class folders of val with the eval transform
    val = model.load_imagenet_from_file(os.path.join(d, "val"), batch_size=40, train=False)
    right = seen = 0
    for data in val():
        p, = exe.run(test_prog, feed=data, fetch_list=[model.predict.name])
        right += int((np.asarray(p).argmax(axis=1) == data[model.label.name].ravel()).sum())
        seen += len(data[model.label.name])
    assert seen == 160
    acc = right / seen
    print("lightning resnet: losses %s, val accuracy %.4f (ceiling %.4f)" % (losses, acc, ceiling))
    assert acc >= ceiling - 0.1


def test_vgg16_and_the_errors_that_name_the_argument(images, tmp_path):
    d, _ = images
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        vgg = lightning.applications.VGG16(image_size=32, num_classes=3, depth=11, width=4, fc_dim=16)
        assert vgg.predict.shape[1] == 3
        with pytest.raises(FleetError, match="4 classes, the model has 3"):
            vgg.load_imagenet_from_file(os.path.join(d, "train.txt"))
        with pytest.raises(FleetError, match="nothing_here"):
            vgg.load_imagenet_from_file(str(tmp_path / "nothing_here"))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(FleetError, match="depth must be 11, 13, 16 or 19"):
            lightning.applications.VGG16(depth=12)
        r50 = lightning.applications.Resnet50()
        assert r50.image.shape[1:] == (3, 224, 224) and r50.predict.shape[1] == 1000


SEED_PROGRAM = '''
import os, sys
import fleet_c.fluid as fluid
import fleet_c.lightning as lightning
from fleet_c.fluid.incubate.fleet.collective import fleet, DistributedStrategy
import fleet_c.fluid.incubate.fleet.base.role_maker as role_maker

configs = lightning.parse_train_configs()
role = role_maker.PaddleCloudRoleMaker(is_collective=True)
fleet.init(role)
model = lightning.applications.Resnet50(configs, image_size=32, num_classes=4, depth=8, width=8)
loader = model.load_imagenet_from_file(os.environ["TRAIN_LIST"])
optimizer = fluid.optimizer.Momentum(learning_rate=configs.lr, momentum=configs.momentum)
optimizer = fleet.distributed_optimizer(optimizer)
optimizer.minimize(model.loss)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
for epoch in range(2):
    n = 0
    for data in loader():
        cost_val = exe.run(fleet.main_program, feed=data, fetch_list=[model.loss.name])
        n += len(data[model.label.name])
    print("worker %d of %d epoch %d images %d" % (fleet.worker_index(), fleet.worker_num(), epoch, n))
'''


def test_the_seed_program_under_fleetrun_reads_a_share_per_worker(images, build_dir, env, tmp_path):
    """Seed 000's lightning program (fluid.incubate's collective fleet) on 2 processes: each
    worker reads its half of the list every epoch."""
    d, _ = images
    prog = tmp_path / "train_lightning.py"
    prog.write_text(SEED_PROGRAM)
    e = dict(env, TRAIN_LIST=os.path.join(d, "train.txt"))
    r = subprocess.run([os.path.join(build_dir, "tools", "fleetrun"), "--nproc_per_node", "2", "--log_dir",
                        str(tmp_path / "log"), "python3", str(prog), "--lr", "0.1", "--batch_size", "16"],
                       env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "worker 0 of 2 epoch 1 images 320" in r.stdout + r.stderr
    assert "worker 1 of 2 epoch 1 images 320" in (tmp_path / "log" / "workerlog.1").read_text()
