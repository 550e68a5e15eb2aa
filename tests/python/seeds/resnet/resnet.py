# The seed's `resnet` module (not shown in the seed), a stand-in: the static-graph ResNet of
# Paddle's model zoo (conv + batch norm units, bottleneck blocks with shortcuts, global
# average pooling, fc), scaled down so that a CPU test runs it in seconds: one bottleneck
# block per stage and 1/16 of the channels.  The input is the seed's 3 x 224 x 224 image.
import math

import fleet_c.fluid as fluid
from fleet_c.fluid.param_attr import ParamAttr


class ResNet():
    def __init__(self, layers=50, width_divisor=16, blocks_per_stage=1):
        if layers < 50:
            raise ValueError("this stand-in builds the bottleneck ResNets (layers >= 50)")
        self.layers = layers
        self.width_divisor = width_divisor
        self.blocks_per_stage = blocks_per_stage

    def net(self, input, class_dim=1000):
        num_filters = [f // self.width_divisor for f in (64, 128, 256, 512)]
        conv = self.conv_bn_layer(input=input, num_filters=64 // self.width_divisor, filter_size=7, stride=2,
                                  act='relu', name="conv1")
        conv = fluid.layers.pool2d(input=conv, pool_size=3, pool_stride=2, pool_padding=1, pool_type='max')
        for block in range(len(num_filters)):
            for i in range(self.blocks_per_stage):
                conv = self.bottleneck_block(input=conv, num_filters=num_filters[block],
                                             stride=2 if i == 0 and block != 0 else 1,
                                             name="res%d%s" % (block + 2, chr(97 + i)))
        pool = fluid.layers.pool2d(input=conv, pool_type='avg', global_pooling=True)
        stdv = 1.0 / math.sqrt(pool.shape[1] * 1.0)
        return fluid.layers.fc(input=pool, size=class_dim,
                               param_attr=ParamAttr(initializer=fluid.initializer.Uniform(-stdv, stdv)))

    def conv_bn_layer(self, input, num_filters, filter_size, stride=1, act=None, name=None):
        conv = fluid.layers.conv2d(input=input, num_filters=num_filters, filter_size=filter_size, stride=stride,
                                   padding=(filter_size - 1) // 2, act=None,
                                   param_attr=ParamAttr(name=name + "_weights"), bias_attr=False)
        bn_name = "bn_" + name
        return fluid.layers.batch_norm(input=conv, act=act, param_attr=ParamAttr(name=bn_name + '_scale'),
                                       bias_attr=ParamAttr(bn_name + '_offset'),
                                       moving_mean_name=bn_name + '_mean',
                                       moving_variance_name=bn_name + '_variance')

    def shortcut(self, input, ch_out, stride, name):
        if input.shape[1] != ch_out or stride != 1:
            return self.conv_bn_layer(input, ch_out, 1, stride, name=name)
        return input

    def bottleneck_block(self, input, num_filters, stride, name):
        conv0 = self.conv_bn_layer(input=input, num_filters=num_filters, filter_size=1, act='relu',
                                   name=name + "_branch2a")
        conv1 = self.conv_bn_layer(input=conv0, num_filters=num_filters, filter_size=3, stride=stride, act='relu',
                                   name=name + "_branch2b")
        conv2 = self.conv_bn_layer(input=conv1, num_filters=num_filters * 4, filter_size=1, act=None,
                                   name=name + "_branch2c")
        short = self.shortcut(input, num_filters * 4, stride, name=name + "_branch1")
        return fluid.layers.elementwise_add(x=short, y=conv2, act='relu')
