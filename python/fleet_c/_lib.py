"""Loading libfleet.so, the C prototypes, and errors.

This module is the only one that touches ctypes' loader.  Where the library is looked for,
in this order (the first that exists is loaded; FLEET_LIB is never skipped silently):

1. ``FLEET_LIB``: the path of libfleet.so, or a directory holding it.
2. An installed prefix (``make install PREFIX=...``): ``<sys.prefix>/lib`` (a prefix that is
   this virtual environment), then the dynamic loader's own search (``LD_LIBRARY_PATH``,
   ldconfig's cache: /usr/local/lib after ``ldconfig``), then the ``libdir`` that
   ``pkg-config fleet`` reports (``PKG_CONFIG_PATH``).
3. The source tree's ``build/`` directory: the tree this package was installed from
   (recorded by setup.py) or, run from the tree itself, the one above ``python/``.

Every call that returns a status goes through ``check``, which raises the exception class
of the status with the library's message (``fl_last_error()``).
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys

from ctypes import (POINTER, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_uint64, c_void_p)

__all__ = ["lib", "check", "FleetError", "library_path", "err_from_last"]

# ---- errors ------------------------------------------------------------------------------


class FleetError(RuntimeError):
    """An error reported by the library.  ``status`` is the C status code (negative),
    ``code`` its name (``"FL_EINVAL"``), and the message is the library's own."""

    def __init__(self, message, status=-1, code="FL_E?"):
        super().__init__(message)
        self.status = status
        self.code = code


class InvalidArgumentError(FleetError, ValueError):
    """FL_EINVAL: a bad argument, an ill-formed program, a wrong feed."""


class NotFoundError(FleetError, LookupError):
    """FL_ENOTFOUND: an unknown variable, op, file or key."""


class FleetTimeoutError(FleetError, TimeoutError):
    """FL_ETIMEDOUT: a deadline expired (a peer is late or gone)."""


class UnsupportedError(FleetError, NotImplementedError):
    """FL_EUNSUPPORTED: a valid request this build does not implement."""


class FleetIOError(FleetError, OSError):
    """FL_EIO / FL_ECORRUPT: a file or socket failed, or a file or frame is malformed."""


_CLASSES = {-1: InvalidArgumentError, -3: FleetIOError, -4: FleetIOError, -5: NotFoundError,
            -6: FleetTimeoutError, -9: UnsupportedError}

# ---- finding the library -------------------------------------------------------------------

_NAME = "libfleet.so"


def _pkg_config_libdir():
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "fleet"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _source_trees():
    trees = []
    try:
        from . import _where  # written by setup.py when the package is installed
        trees.append(_where.SOURCE_TREE)
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    trees.append(os.path.dirname(os.path.dirname(here)))  # <tree>/python/fleet_c
    return trees


def _candidates():
    """(where, path) pairs in search order, made as the search goes (the loader's search and
    pkg-config start processes); path may be a bare soname for the dynamic loader."""
    yield "prefix " + sys.prefix, os.path.join(sys.prefix, "lib", _NAME)
    found = ctypes.util.find_library("fleet")
    if found:
        yield "the dynamic loader's search", found
    libdir = _pkg_config_libdir()
    if libdir:
        yield "pkg-config's libdir", os.path.join(libdir, _NAME)
    for tree in _source_trees():
        yield "the source tree " + tree, os.path.join(tree, "build", _NAME)


def _load():
    env = os.environ.get("FLEET_LIB")
    if env:
        path = os.path.join(env, _NAME) if os.path.isdir(env) else env
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            raise ImportError("fleet_c: FLEET_LIB=%s: cannot load %s: %s" % (env, path, e)) from None
    tried = []
    for where, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s)" % (path, where))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
    raise ImportError("fleet_c: libfleet.so not found.  Build it with `make` in the Fleet source tree, "
                      "or set FLEET_LIB to its path.  Looked in:\n  " + "\n  ".join(tried))


lib, _path = _load()


def library_path():
    """The path (or soname) of the libfleet.so this process loaded."""
    return _path


# ---- prototypes -----------------------------------------------------------------------------

P = c_void_p
PP = POINTER(c_void_p)
I64P = POINTER(c_int64)
SP = POINTER(c_char_p)


class Initializer(ctypes.Structure):
    _fields_ = [("kind", c_int), ("a", c_float), ("b", c_float), ("seed", c_uint64)]


class ParamAttr(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("init", Initializer), ("learning_rate", c_float), ("l2_decay", c_float),
                ("frozen", c_int), ("l1_decay", c_float)]


class FcAttr(ctypes.Structure):
    _fields_ = [("num_flatten_dims", c_int), ("weight", ParamAttr), ("bias", ParamAttr), ("no_bias", c_int)]


class EmbeddingAttr(ctypes.Structure):
    _fields_ = [("is_sparse", c_int), ("is_distributed", c_int), ("has_padding_idx", c_int),
                ("padding_idx", c_int64), ("param", ParamAttr)]


class Conv2dAttr(ctypes.Structure):
    _fields_ = [("stride", c_int * 2), ("padding", c_int * 2), ("dilation", c_int * 2), ("groups", c_int),
                ("filter", ParamAttr), ("bias", ParamAttr), ("no_bias", c_int)]


class Conv2dTransposeAttr(ctypes.Structure):
    _fields_ = [("stride", c_int * 2), ("padding", c_int * 4), ("dilation", c_int * 2), ("groups", c_int),
                ("output_size", c_int * 2), ("output_padding", c_int * 2), ("padding_algorithm", c_char_p),
                ("filter", ParamAttr), ("bias", ParamAttr), ("no_bias", c_int)]


# fl_layer_print's flags (FL_PRINT_* of include/fleet/graph.h)
PRINT_NAME, PRINT_TYPE, PRINT_SHAPE, PRINT_LOD, PRINT_LAYOUT = 1, 2, 4, 8, 16


class Pool2dAttr(ctypes.Structure):
    _fields_ = [("pool_size", c_int * 2), ("stride", c_int * 2), ("padding", c_int * 2), ("global_pooling", c_int),
                ("inclusive", c_int), ("ceil_mode", c_int)]


class BatchNormAttr(ctypes.Structure):
    _fields_ = [("scale", ParamAttr), ("bias", ParamAttr), ("moving_mean_name", c_char_p),
                ("moving_variance_name", c_char_p), ("use_global_stats", c_int)]


class Feed(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_void_p)]


class DatasetStats(ctypes.Structure):
    _fields_ = [("instances", c_int64), ("batches", c_int64), ("seconds", c_double), ("nfetch", c_int),
                ("fetch", c_double * 16)]


class DgcStats(ctypes.Structure):
    """fleet_dgc_stats (include/fleet/fleet.h)."""
    _fields_ = [("params", c_int64), ("dense_steps", c_int64), ("sparse_steps", c_int64), ("dense_bytes", c_uint64),
                ("sparse_bytes", c_uint64)]


class UserRole(ctypes.Structure):
    _fields_ = [("is_collective", c_int), ("current_id", c_int), ("role", c_int), ("worker_num", c_int),
                ("worker_endpoints", SP), ("n_worker_endpoints", c_int), ("server_endpoints", SP),
                ("n_server_endpoints", c_int)]


class Strategy(ctypes.Structure):
    """fleet_strategy, held as an opaque buffer larger than the C struct.  Only the C
    functions read or write its fields (fleet_strategy_set / _check / _to_text), so the
    Python side never depends on the layout; the default value is returned into it by
    fleet_strategy_default (a struct this large is returned through a hidden pointer to the
    caller's buffer, of which the callee writes only its own size)."""
    _fields_ = [("_align", c_double), ("_raw", ctypes.c_uint8 * 8192)]


class ImageOptions(ctypes.Structure):
    """fl_data_image_options (include/fleet/data.h): the image reader's options."""
    _fields_ = [("batch_size", c_int), ("threads", c_int), ("prefetch", c_int), ("train", c_int), ("crop", c_int),
                ("resize", c_int), ("scale", c_float * 2), ("ratio", c_float * 2), ("flip", c_float),
                ("mean", c_float * 3), ("std", c_float * 3), ("shuffle", c_int), ("drop_last", c_int),
                ("seed", c_uint64), ("rank", c_int), ("nranks", c_int), ("skip_bad", c_int),
                ("dct_scale", c_int)]


class ResnetConfig(ctypes.Structure):
    """fl_model_resnet_config (include/fleet/models.h)."""
    _fields_ = [("input_name", c_char_p), ("label_name", c_char_p), ("channels", c_int), ("height", c_int),
                ("width", c_int), ("depth", c_int), ("base_filters", c_int), ("imagenet_stem", c_int),
                ("num_classes", c_int), ("stride_in_1x1", c_int)]


class VggConfig(ctypes.Structure):
    """fl_model_vgg_config (include/fleet/models.h)."""
    _fields_ = [("input_name", c_char_p), ("label_name", c_char_p), ("channels", c_int), ("height", c_int),
                ("width", c_int), ("depth", c_int), ("base_filters", c_int), ("fc_dim", c_int), ("dropout", c_float),
                ("num_classes", c_int)]


class ImageModel(ctypes.Structure):
    """fl_model_resnet and fl_model_vgg (the same four variables)."""
    _fields_ = [("input", c_void_p), ("label", c_void_p), ("predict", c_void_p), ("loss", c_void_p)]


class AppConfig(ctypes.Structure):
    """fl_app_config, held as an opaque buffer larger than the C struct: only the C functions
    read or write it (fl_app_config_default / _set / _get, fl_app_parse_train_configs)."""
    _fields_ = [("_align", c_double), ("_raw", ctypes.c_uint8 * 16384)]


_PROTOS = {
    # base
    "fl_version": (c_char_p, []), "fl_strerror": (c_char_p, [c_int]), "fl_last_error": (c_char_p, []),
    "fl_last_status": (c_int, []), "fl_clear_error": (None, []),
    # tensor
    "fl_tensor_from_data": (P, [c_int, c_int, I64P, c_void_p]), "fl_tensor_create": (P, [c_int, c_int, I64P]),
    "fl_tensor_free": (None, [P]), "fl_tensor_dtype": (c_int, [P]), "fl_tensor_ndim": (c_int, [P]),
    "fl_tensor_shape": (I64P, [P]), "fl_tensor_nbytes": (c_size_t, [P]), "fl_tensor_data": (c_void_p, [P]),
    "fl_tensor_cdata": (c_void_p, [P]), "fl_tensor_copy": (c_int, [P, P]), "fl_tensor_resize": (c_int, [P, c_int, c_int, I64P]),
    "fl_tensor_set_lod": (c_int, [P, I64P, c_int64]), "fl_tensor_lod": (I64P, [P, I64P]),
    "fl_tensor_rows": (I64P, [P, I64P, I64P]),
    # programs and variables
    "fl_prog_create": (P, []), "fl_prog_free": (None, [P]), "fl_prog_startup": (P, [P]),
    "fl_prog_set_seed": (None, [P, c_uint64]), "fl_prog_status": (c_int, [P]), "fl_prog_error": (c_char_p, [P]),
    "fl_prog_clone": (P, [P, c_int]), "fl_prog_var": (P, [P, c_char_p]), "fl_prog_num_vars": (c_int, [P]),
    "fl_prog_var_at": (P, [P, c_int]), "fl_prog_num_ops": (c_int, [P]), "fl_prog_op_type": (c_char_p, [P, c_int]),
    "fl_prog_to_text": (c_int, [P, POINTER(c_void_p), POINTER(c_size_t)]),
    "fl_var_name": (c_char_p, [P]), "fl_var_dtype": (c_int, [P]), "fl_var_ndim": (c_int, [P]),
    "fl_var_shape": (I64P, [P]), "fl_var_lod_level": (c_int, [P]), "fl_var_persistable": (c_int, [P]),
    "fl_var_is_param": (c_int, [P]), "fl_var_set_stop_gradient": (None, [P, c_int]),
    "fl_var_stop_gradient": (c_int, [P]), "fl_var_prog": (P, [P]),
    # layers
    "fl_layer_data": (P, [P, c_char_p, c_int, I64P, c_int, c_int]),
    "fl_layer_create_parameter": (P, [P, c_int, I64P, c_int, POINTER(ParamAttr)]),
    "fl_layer_fc_ex": (P, [PP, c_int, c_int64, c_char_p, POINTER(FcAttr)]),
    "fl_layer_embedding": (P, [P, c_int64, c_int64, POINTER(EmbeddingAttr)]),
    "fl_layer_sequence_pool": (P, [P, c_char_p]), "fl_layer_concat": (P, [PP, c_int, c_int]),
    "fl_layer_reshape": (P, [P, c_int, I64P]),
    "fl_layer_elementwise_add": (P, [P, P, c_int]), "fl_layer_elementwise_sub": (P, [P, P, c_int]),
    "fl_layer_elementwise_mul": (P, [P, P, c_int]), "fl_layer_elementwise_div": (P, [P, P, c_int]),
    "fl_layer_relu": (P, [P]), "fl_layer_tanh": (P, [P]), "fl_layer_sigmoid": (P, [P]),
    "fl_layer_softsign": (P, [P]), "fl_layer_softmax": (P, [P]), "fl_layer_cross_entropy": (P, [P, P]),
    "fl_layer_softmax_with_cross_entropy": (P, [P, P]),
    "fl_layer_sigmoid_cross_entropy_with_logits": (P, [P, P]), "fl_layer_log_loss": (P, [P, P, c_float]),
    "fl_layer_mean": (P, [P]), "fl_layer_reduce_sum": (P, [P, POINTER(c_int), c_int, c_int]),
    "fl_layer_cos_sim": (P, [P, P]), "fl_layer_scale": (P, [P, c_float, c_float, c_int]),
    "fl_layer_matmul": (P, [P, P, c_int, c_int, c_float]),
    "fl_layer_square": (P, [P]), "fl_layer_cast": (P, [P, c_int]),
    "fl_layer_reduce_mean": (P, [P, POINTER(c_int), c_int, c_int]),
    "fl_layer_fill_constant_batch_size_like": (P, [P, c_int, I64P, c_int, c_float]),
    "fl_layer_dropout": (P, [P, c_float, c_char_p]), "fl_layer_accuracy": (P, [P, P, c_int]),
    "fl_layer_auc": (P, [P, P, c_int, c_int, PP]),
    "fl_layer_conv2d": (P, [P, c_int64, c_int, c_int, c_char_p, POINTER(Conv2dAttr)]),
    "fl_layer_pool2d_ex": (P, [P, c_char_p, POINTER(Pool2dAttr)]),
    "fl_layer_batch_norm": (P, [P, c_char_p, c_int, c_float, c_float, POINTER(BatchNormAttr)]),
    "fl_layer_conv2d_transpose": (P, [P, c_int64, c_int, c_int, c_char_p, POINTER(Conv2dTransposeAttr)]),
    "fl_layer_sequence_conv": (P, [P, c_int64, c_int, c_int, c_int, c_char_p, POINTER(ParamAttr),
                                   POINTER(ParamAttr), c_int]),
    "fl_layer_print": (P, [P, c_int, c_char_p, c_int, c_int, c_char_p]),
    # layers_more.py
    "fl_layer_elementwise_max": (P, [P, P, c_int]), "fl_layer_elementwise_min": (P, [P, P, c_int]),
    "fl_layer_compare": (P, [P, P, c_char_p]), "fl_layer_logical": (P, [P, P, c_char_p]),
    "fl_layer_where": (P, [P, P, P]),
    "fl_init_assign": (c_int, [P, POINTER(c_float), c_int64, POINTER(Initializer)]),
    "fl_layer_fill_constant": (P, [P, c_int, I64P, c_int, c_double]),
    "fl_layer_l2_normalize": (P, [P, c_int, c_float]), "fl_layer_topk": (P, [P, c_int, PP]),
    "fl_layer_unary": (P, [P, c_char_p]), "fl_layer_shape": (P, [P]),
    "fl_layer_assign_value": (P, [P, c_int, I64P, c_int, c_void_p]),
    "fl_layer_create_global_var": (P, [P, c_char_p, c_int, I64P, c_int, c_float]),
    "fl_layer_create_global_var_ex": (P, [P, c_char_p, c_int, I64P, c_int, c_float, c_int]),
    "fl_layer_piecewise_decay": (P, [P, I64P, c_int, POINTER(c_float)]),
    "fl_layer_cosine_decay": (P, [P, c_float, c_int64, c_int64]),
    "fl_layer_exponential_decay": (P, [P, c_float, c_int64, c_float, c_int]),
    "fl_layer_natural_exp_decay": (P, [P, c_float, c_int64, c_float, c_int]),
    "fl_layer_inverse_time_decay": (P, [P, c_float, c_int64, c_float, c_int]),
    "fl_layer_noam_decay": (P, [P, c_int64, c_int64, c_float]),
    "fl_layer_polynomial_decay": (P, [P, c_float, c_int64, c_float, c_float, c_int]),
    "fl_layer_linear_lr_warmup": (P, [P, P, c_float, c_int64, c_float, c_float]),
    "fl_opt_rmsprop": (P, [c_float, c_float, c_float, c_float, c_int]), "fl_opt_set_l1": (c_int, [P, c_float]),
    "fl_opt_set_grad_clip": (c_int, [P, c_int, c_float, c_float]),
    "fl_opt_set_lr_var": (c_int, [P, P]),
    "fl_layer_matmul_v2": (P, [P, P, c_int, c_int]),
    "fl_layer_layer_norm": (P, [P, c_int, c_float, c_int, c_int, POINTER(ParamAttr), POINTER(ParamAttr)]),
    "fl_layer_gelu": (P, [P, c_int]), "fl_layer_one_hot": (P, [P, c_int64]),
    "fl_layer_label_smooth": (P, [P, P, c_float]), "fl_layer_transpose": (P, [P, c_int, I64P]),
    "fl_layer_gather": (P, [P, P]), "fl_layer_expand": (P, [P, c_int, I64P]),
    # optimizers
    "fl_opt_sgd": (P, [c_float]), "fl_opt_momentum": (P, [c_float, c_float, c_int]),
    "fl_opt_adagrad": (P, [c_float, c_float]), "fl_opt_adam": (P, [c_float, c_float, c_float, c_float]),
    "fl_opt_set_l2": (c_int, [P, c_float]), "fl_opt_set_exponential_decay": (c_int, [P, c_int64, c_float, c_int]),
    "fl_opt_minimize_ex": (c_int, [P, P, SP, c_int]), "fl_opt_free": (None, [P]),
    # scopes and executor
    "fl_scope_create": (P, [P]), "fl_scope_free": (None, [P]), "fl_scope_find": (P, [P, c_char_p]),
    "fl_scope_var": (P, [P, c_char_p]), "fl_scope_zero": (c_int, [P, c_char_p]),
    "fl_scope_num_vars": (c_int, [P]), "fl_scope_name_at": (c_char_p, [P, c_int]),
    "fl_exe_create": (P, [P]), "fl_exe_free": (None, [P]),
    "fl_exe_run": (c_int, [P, P, POINTER(Feed), c_int, SP, c_int, PP]),
    "fl_exe_train_from_dataset": (c_int, [P, P, P, c_int, SP, SP, c_int, c_int, POINTER(DatasetStats)]),
    "fl_exe_infer_from_dataset": (c_int, [P, P, P, c_int, SP, SP, c_int, c_int, POINTER(DatasetStats)]),
    # datasets
    "fl_dataset_create": (P, [c_char_p]), "fl_dataset_free": (None, [P]),
    "fl_dataset_set_filelist": (c_int, [P, SP, c_int]), "fl_dataset_set_batch_size": (c_int, [P, c_int]),
    "fl_dataset_set_thread": (c_int, [P, c_int]), "fl_dataset_set_use_var": (c_int, [P, PP, c_int]),
    "fl_dataset_set_pipe_command": (c_int, [P, c_char_p]), "fl_dataset_set_pipe_timeout": (c_int, [P, c_double]),
    "fl_dataset_set_format": (c_int, [P, c_char_p]), "fl_dataset_set_sparse_feature_dim": (c_int, [P, c_uint64]),
    "fl_dataset_set_bad_line_policy": (c_int, [P, c_char_p]), "fl_dataset_thread_num": (c_int, [P]),
    "fl_dataset_batch_size": (c_int, [P]), "fl_dataset_bad_lines": (c_int64, [P]),
    "fl_dataset_load_into_memory": (c_int, [P]), "fl_dataset_preload_into_memory": (c_int, [P]),
    "fl_dataset_wait_preload_done": (c_int, [P]), "fl_dataset_local_shuffle": (c_int, [P, c_uint64]),
    "fl_dataset_release_memory": (None, [P]), "fl_dataset_get_memory_data_size": (c_int64, [P]),
    # io
    "fl_io_save_persistables": (c_int, [P, c_char_p, P]), "fl_io_load_persistables": (c_int, [P, c_char_p, P]),
    "fl_io_save_inference_model": (c_int, [P, c_char_p, SP, c_int, PP, c_int, P]),
    "fl_io_load_inference_model": (c_int, [P, c_char_p, PP, POINTER(SP), POINTER(c_int), POINTER(SP),
                                           POINTER(c_int)]),
    "fl_io_free_names": (None, [SP, c_int]),
    "fl_io_read_safetensors": (c_int, [c_char_p, POINTER(SP), POINTER(POINTER(c_void_p)), POINTER(c_int)]),
    "fl_io_write_safetensors": (c_int, [c_char_p, SP, POINTER(c_void_p), c_int]),
    "fl_io_free_tensors": (None, [SP, POINTER(c_void_p), c_int]),
    # fleet
    "fleet_role_paddlecloud": (c_int, [c_int, PP]), "fleet_role_user_defined": (c_int, [POINTER(UserRole), PP]),
    "fleet_role_mpi": (c_int, [c_int, PP]), "fleet_role_slurm": (c_int, [c_int, PP]),
    "fleet_role_torchrun": (c_int, [PP]), "fleet_role_from_env": (c_int, [c_int, PP]),
    "fleet_role_free": (None, [P]),
    "fleet_strategy_default": (Strategy, []), "fleet_strategy_set": (c_int, [POINTER(Strategy), c_char_p, c_char_p]),
    "fleet_strategy_check": (c_int, [POINTER(Strategy)]), "fleet_strategy_to_text": (c_void_p, [POINTER(Strategy)]),
    "fleet_strategy_get": (c_int, [POINTER(Strategy), c_char_p, c_char_p, c_size_t]),
    "fleet_init": (P, [P, POINTER(Strategy)]), "fleet_init_collective": (P, [P, POINTER(Strategy)]),
    "fleet_is_collective": (c_int, [P]), "fleet_is_distributed": (c_int, [P]), "fleet_is_worker": (c_int, [P]),
    "fleet_is_server": (c_int, [P]), "fleet_is_first_worker": (c_int, [P]), "fleet_worker_index": (c_int, [P]),
    "fleet_worker_num": (c_int, [P]), "fleet_server_index": (c_int, [P]), "fleet_server_num": (c_int, [P]),
    "fleet_worker_endpoints_str": (c_char_p, [P]), "fleet_server_endpoints_str": (c_char_p, [P]),
    "fleet_distributed_optimizer": (P, [P, P, POINTER(Strategy)]),
    "fleet_transpile": (c_int, [P, P, P, POINTER(Strategy)]),
    "fleet_layer_allreduce": (P, [P, P, c_char_p]), "fleet_layer_allgather": (P, [P, P]),
    "fleet_init_worker": (c_int, [P]), "fleet_stop_worker": (c_int, [P]), "fleet_init_server": (c_int, [P, c_char_p]),
    "fleet_run_server": (c_int, [P]), "fleet_barrier_worker": (c_int, [P]),
    "fleet_util_all_reduce": (c_int, [P, c_void_p, c_size_t, c_int, c_char_p]),
    "fl_auc_from_stats": (c_int, [I64P, I64P, c_int64, POINTER(c_double)]),
    "fleet_dist_infer_program": (c_int, [P, P]),
    "fleet_util_all_gather": (c_int, [P, c_void_p, c_void_p, c_size_t, c_int]), "fleet_util_barrier": (c_int, [P]),
    "fleet_save_persistables": (c_int, [P, P, c_char_p, P]),
    "fleet_save_inference_model": (c_int, [P, P, c_char_p, SP, c_int, PP, c_int, P]),
    "fleet_save_persistables_alone": (c_int, [P, P, c_char_p, P]),
    "fleet_save_inference_model_alone": (c_int, [P, P, c_char_p, SP, c_int, PP, c_int, P]),
    "fleet_split_files": (c_int, [P, SP, c_int, POINTER(SP), POINTER(c_int)]),
    "fleet_dataset_global_shuffle": (c_int, [P, P, c_uint64]),
    "fleet_dataset_memory_data_size": (c_int64, [P, P]),
    "fleet_dgc_stats_get": (c_int, [P, POINTER(DgcStats)]),
    # images, image models and lightning's configuration (fleet_c.lightning)
    "fl_data_image_options_init": (None, [POINTER(ImageOptions)]),
    "fl_data_image_reader_create": (P, [c_char_p, POINTER(ImageOptions)]),
    "fl_data_image_reader_free": (None, [P]), "fl_data_image_reader_size": (c_int64, [P]),
    "fl_data_image_reader_num_classes": (c_int, [P]), "fl_data_image_reader_bad_images": (c_int64, [P]),
    "fl_data_image_reader_begin": (c_int, [P, c_int]), "fl_data_image_reader_next": (c_int, [P, c_void_p, c_void_p]),
    "fl_model_resnet50": (ResnetConfig, []), "fl_model_resnet_build": (c_int, [P, POINTER(ResnetConfig), POINTER(ImageModel)]),
    "fl_model_vgg16": (VggConfig, []), "fl_model_vgg_build": (c_int, [P, POINTER(VggConfig), POINTER(ImageModel)]),
    "fl_app_find": (P, [c_char_p]), "fl_app_config_default": (None, [P, POINTER(AppConfig)]),
    "fl_app_parse_train_configs": (c_int, [c_int, SP, P, POINTER(AppConfig)]),
    "fl_app_config_set": (c_int, [POINTER(AppConfig), c_char_p, c_char_p]),
    "fl_app_config_get": (c_int, [POINTER(AppConfig), c_char_p, c_char_p, c_size_t]),
    "fl_app_option": (c_char_p, [c_int, SP]),
    "fl_app_load_imagenet_from_file": (c_int, [POINTER(AppConfig), c_char_p, POINTER(c_int)]),
}


def _declare():
    missing = []
    for name, (res, args) in _PROTOS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        fn.restype = res
        fn.argtypes = args
    if missing:
        raise ImportError("fleet_c: %s lacks %s: it is older than this package (0.1.0); rebuild it"
                          % (_path, ", ".join(missing)))


_declare()

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def c_free(ptr):
    """free() for the buffers the library returns malloc'ed (program text, strategy text)."""
    if ptr:
        _libc.free(ptr)


# ---- status checks -------------------------------------------------------------------------


def _text(b):
    return b.decode("utf-8", "replace") if b else ""


def error_for(status, message):
    code = _text(lib.fl_strerror(status))
    return _CLASSES.get(status, FleetError)(message or code, status, code)


def err_from_last(prefix=None):
    """The exception of the calling thread's last library error."""
    st = lib.fl_last_status() or -1
    msg = _text(lib.fl_last_error())
    return error_for(st, "%s: %s" % (prefix, msg) if prefix else msg)


def check(status):
    """Raises the library's error when status is not FL_OK; returns status otherwise."""
    if status != 0:
        raise error_for(status, _text(lib.fl_last_error()))
    return status


def check_ptr(ptr, what=None):
    """Raises the library's last error when a constructor returned NULL."""
    if not ptr:
        raise err_from_last(what)
    return ptr


def cstr(s):
    """str -> bytes for a const char * argument (None stays None)."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    return str(s).encode("utf-8")


def cstr_array(items):
    """A const char *const[] of the given strings (the array keeps the bytes alive)."""
    enc = [cstr(s) for s in items]
    arr = (c_char_p * max(1, len(enc)))(*enc)
    return arr


def ptr_array(ptrs):
    return (c_void_p * max(1, len(ptrs)))(*ptrs)


def version():
    """The C library's version string (fl_version())."""
    return _text(lib.fl_version())


# Objects are not freed while the interpreter shuts down: the order in which Python
# finalises them is arbitrary, and the process is about to end anyway.
shutting_down = [False]


def _at_exit():
    shutting_down[0] = True


import atexit  # noqa: E402

atexit.register(_at_exit)
