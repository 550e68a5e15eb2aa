"""paddle.static.nn: layers with 2.x argument names."""
from .. import layers as _L

__all__ = ["fc", "embedding", "sparse_embedding", "conv2d", "conv2d_transpose", "batch_norm", "sequence_pool",
           "sequence_conv", "create_parameter", "layer_norm"]


def fc(x, size, num_flatten_dims=1, weight_attr=None, bias_attr=None, activation=None, name=None):
    return _L.fc(x, size, num_flatten_dims, weight_attr, bias_attr, activation)


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None, param_attr=None,
              dtype="float32"):
    return _L.embedding(input, size, is_sparse, is_distributed, padding_idx, param_attr, dtype)


def conv2d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None, param_attr=None,
           bias_attr=None, use_cudnn=True, act=None, name=None, data_format="NCHW"):
    return _L.conv2d(input, num_filters, filter_size, stride, padding, dilation, groups, param_attr, bias_attr,
                     use_cudnn, act, name, data_format)


def batch_norm(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None, bias_attr=None,
               data_layout="NCHW", in_place=False, name=None, moving_mean_name=None, moving_variance_name=None,
               do_model_average_for_mean_and_var=True, use_global_stats=False):
    return _L.batch_norm(input, act, is_test, momentum, epsilon, param_attr, bias_attr, data_layout, in_place, name,
                         moving_mean_name, moving_variance_name, do_model_average_for_mean_and_var,
                         use_global_stats)


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0):
    return _L.sequence_pool(input, pool_type, is_test, pad_value)


create_parameter = _L.create_parameter
layer_norm = _L.layer_norm
conv2d_transpose = _L.conv2d_transpose  # the same arguments in 1.x and 2.x
sequence_conv = _L.sequence_conv


def sparse_embedding(input, size, padding_idx=None, is_test=False, entry=None, table_class="CommonSparseTable",
                     param_attr=None, dtype="float32"):
    """paddle.static.nn.sparse_embedding: an embedding with a sparse gradient whose table lives
    on the parameter servers in PS mode (is_sparse and is_distributed); locally, a sparse
    embedding.  entry (admission rules) is not supported."""
    if entry is not None:
        raise NotImplementedError("sparse_embedding: entry (ProbabilityEntry / CountFilterEntry) is not supported")
    return _L.embedding(input, size, is_sparse=True, is_distributed=True, padding_idx=padding_idx,
                        param_attr=param_attr, dtype=dtype)
