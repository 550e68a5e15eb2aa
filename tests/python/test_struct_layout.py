"""The ctypes mirrors of the C value structs (python/fleet_c/_lib.py) against the C side:
each struct's size and alignment, and each field's offset and size, as the compiler laid
them out (BUILD/tests/bin/struct_layout prints them).  A mirror added to _lib.py without a
row in MIRRORS, or a C struct that gains, loses or moves a field, fails here."""
import ctypes
import os
import subprocess

import pytest

import fleet_c._lib as _lib

# ctypes class -> C typedef; Strategy is an opaque buffer: only its size and alignment count.
MIRRORS = {
    "Initializer": "fl_initializer",
    "ParamAttr": "fl_param_attr",
    "FcAttr": "fl_fc_attr",
    "EmbeddingAttr": "fl_embedding_attr",
    "Conv2dAttr": "fl_conv2d_attr",
    "Conv2dTransposeAttr": "fl_conv2d_transpose_attr",
    "Pool2dAttr": "fl_pool2d_attr",
    "BatchNormAttr": "fl_batch_norm_attr",
    "Feed": "fl_feed",
    "DatasetStats": "fl_exe_dataset_stats",
    "DgcStats": "fleet_dgc_stats",
    "UserRole": "fleet_user_role",
    "ImageOptions": "fl_data_image_options",
    "ResnetConfig": "fl_model_resnet_config",
    "VggConfig": "fl_model_vgg_config",
    "ImageModel": "fl_model_resnet",  # fl_model_vgg has the same four fields (checked in C)
}
OPAQUE = {"Strategy": "fleet_strategy", "AppConfig": "fl_app_config"}


@pytest.fixture(scope="module")
def c_layout(build_dir):
    """{struct: (size, align, [(field, offset, size), ...])} from the C program."""
    exe = os.path.join(build_dir, "tests", "bin", "struct_layout")
    out = subprocess.run([exe], stdout=subprocess.PIPE, universal_newlines=True, check=True, timeout=30).stdout
    layout, cur = {}, None
    for line in out.splitlines():
        kind, name, a, b = line.split()[:4]
        if kind == "STRUCT":
            cur = layout[name] = (int(a), int(b), [])
        else:
            cur[2].append((name, int(a), int(b)))
    return layout


def test_every_mirror_has_a_row():
    mirrors = sorted(n for n, v in vars(_lib).items()
                     if isinstance(v, type) and issubclass(v, ctypes.Structure) and v is not ctypes.Structure)
    assert mirrors == sorted(list(MIRRORS) + list(OPAQUE)), "a ctypes struct of _lib.py without a row in MIRRORS"
    assert len(MIRRORS) == 16


@pytest.mark.parametrize("py_name", sorted(MIRRORS))
def test_mirror_matches_c(py_name, c_layout):
    cls, c_name = getattr(_lib, py_name), MIRRORS[py_name]
    size, align, fields = c_layout[c_name]
    py_fields = [(name, getattr(cls, name).offset, getattr(cls, name).size) for name, _ in cls._fields_]
    assert py_fields == fields, "%s: fields (name, offset, size) differ from C's %s" % (py_name, c_name)
    assert (ctypes.sizeof(cls), ctypes.alignment(cls)) == (size, align), \
        "%s: sizeof/alignment (%d, %d), C's %s (%d, %d)" % (py_name, ctypes.sizeof(cls), ctypes.alignment(cls),
                                                             c_name, size, align)


@pytest.mark.parametrize("py_name", sorted(OPAQUE))
def test_opaque_buffer_holds_c(py_name, c_layout):
    cls = getattr(_lib, py_name)
    size, align, _ = c_layout[OPAQUE[py_name]]
    assert ctypes.sizeof(cls) >= size and ctypes.alignment(cls) >= align, \
        "%s (%d bytes) is smaller than %s (%d bytes)" % (py_name, ctypes.sizeof(cls), OPAQUE[py_name], size)
