# What the seed's train_fleet_static.py defines outside train_resnet() and does not show:
# class_dim, get_train_loader and optimizer_setting (FleetX's examples/resnet).  The loader
# is synthetic (the flowers data set is not downloaded): each epoch yields two batches of
# four images, different on each trainer, in DataLoader's form (a list with one feed dict
# per device).
import os

import numpy as np

import fleet_c as paddle

class_dim = 102
batch_size = 4
base_lr = 0.01
momentum_rate = 0.9
l2_decay = 1e-4


def optimizer_setting(parameter_list=None):
    return paddle.optimizer.Momentum(learning_rate=base_lr, momentum=momentum_rate,
                                     weight_decay=paddle.regularizer.L2Decay(l2_decay), parameters=parameter_list)


def get_train_loader(feed_list, place, batches_per_epoch=2):
    names = [v.name for v in feed_list]
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))

    def loader():
        rng = np.random.RandomState(1000 + rank)
        for _ in range(batches_per_epoch):
            label = rng.randint(0, class_dim, size=(batch_size, 1)).astype('int64')
            image = rng.normal(size=(batch_size, 3, 224, 224)).astype('float32')
            image[:, 0, :8, :8] += label.reshape(-1, 1, 1) / class_dim  # something to learn
            yield [dict(zip(names, (image, label)))]

    return loader
