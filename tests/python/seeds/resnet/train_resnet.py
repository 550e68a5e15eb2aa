# -*- coding: UTF-8 -*-
# The seed's program (shared seed 004: Paddle 2.x static-graph data parallel), its
# train_resnet() as printed there.  The seed leaves out the rest of its file: `os`, the
# resnet model, class_dim, get_train_loader and optimizer_setting; the two lines after
# the seed's imports bring them from this directory (resnet.py, train_helpers.py).
import fleet_c as paddle
import os
import resnet
from train_helpers import class_dim, get_train_loader, optimizer_setting

def train_resnet():
   # 1.开启静态图模式
   paddle.enable_static()

   # 2. 定义网络对象，损失函数和优化器
   paddle.vision.set_image_backend('cv2')
   image = paddle.static.data(name="x", shape=[None, 3, 224, 224], dtype='float32')
   label= paddle.static.data(name="y", shape=[None, 1], dtype='int64')
   model = resnet.ResNet(layers=50)
   out = model.net(input=image, class_dim=class_dim)
   avg_cost = paddle.nn.functional.cross_entropy(input=out, label=label)
   acc_top1 = paddle.metric.accuracy(input=out, label=label, k=1)
   acc_top5 = paddle.metric.accuracy(input=out, label=label, k=5)

   place = paddle.CUDAPlace(int(os.environ.get('FLAGS_selected_gpus', 0)))
   train_loader = get_train_loader([image, label], place)

   optimizer = optimizer_setting()
   optimizer.minimize(avg_cost)

   exe = paddle.static.Executor(place)
   exe.run(paddle.static.default_startup_program())

   # 3. 进行模型训练（前向、反向、参数更新），并打印相关结果
   epoch = 10
   step = 0
   for eop in range(epoch):
      for batch_id, data in enumerate(train_loader()):
         loss, acc1, acc5 = exe.run(paddle.static.default_main_program(), feed=data, fetch_list=[avg_cost.name, acc_top1.name, acc_top5.name])             
         print("[Epoch %d, batch %d] loss: %.5f, acc1: %.5f, acc5: %.5f" % (eop, batch_id, loss, acc1, acc5))


if __name__ == '__main__':
   train_resnet()
