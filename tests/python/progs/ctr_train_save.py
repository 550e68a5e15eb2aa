"""The model ctr/infer.py reads, made as a user would: ctr/train.py's local training (its
network_conf.ctr_dnn_model_dataset, a QueueDataset through `python criteo_reader.py DIM`,
batch 100, 10 threads, SGD 1e-4, 20 epochs) plus the save train.py lacks: after epoch i,
save_inference_model into models/epoch<i>.model with the feeds and [loss, auc], the layout
infer.py loads.  Run in a prepared copy of the ctr folder (its imports rewritten):

    python3 ctr_train_save.py SPARSE_FEATURE_DIM

Prints "epoch <i> auc <AUC>" per epoch: the auc layer's global statistics are zeroed before
each epoch (infer.py's idiom), so it is that epoch's AUC."""
import os
import sys

import numpy as np

import fleet_c.fluid as fluid

sys.path.insert(0, os.getcwd())  # the program's folder: its network_conf.py
from network_conf import ctr_dnn_model_dataset  # noqa: E402

dim = int(sys.argv[1])
dense = fluid.layers.data(name="dense_input", shape=[13], dtype="float32")
sparse = [fluid.layers.data(name="C%d" % i, shape=[1], lod_level=1, dtype="int64") for i in range(1, 27)]
label = fluid.layers.data(name="label", shape=[1], dtype="int64")
dataset = fluid.DatasetFactory().create_dataset()
dataset.set_use_var([dense] + sparse + [label])
dataset.set_pipe_command("python criteo_reader.py %d" % dim)
dataset.set_batch_size(100)
dataset.set_thread(10)
dataset.set_filelist(["raw_data/part-%d" % i for i in range(len(os.listdir("raw_data")))])
loss, auc_var, _ = ctr_dnn_model_dataset(dense, sparse, label, 10, dim)
fluid.optimizer.SGD(learning_rate=1e-4).minimize(loss)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(fluid.default_startup_program())
feeds = ["dense_input"] + ["C%d" % i for i in range(1, 27)] + ["label"]
for epoch in range(1, 21):
    for name in ("_generated_var_2", "_generated_var_3"):  # the global AUC's statistics: this epoch's AUC
        t = fluid.global_scope().var(name).get_tensor()
        t.set(np.zeros(t._get_dims()).astype("int64"), fluid.CPUPlace())
    res = exe.train_from_dataset(program=fluid.default_main_program(), dataset=dataset, fetch_list=[auc_var],
                                 fetch_info=["auc"], print_period=10 ** 9)
    value = list(res["fetch"].values())[0]
    print("epoch %d auc %.6f" % (epoch, float(np.array(value).reshape(-1)[0])))
    fluid.io.save_inference_model("models/epoch%d.model" % epoch, feeds, [loss, auc_var], exe)
