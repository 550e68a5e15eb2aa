"""bench/torch_blas.py - which BLAS a PyTorch peer's products run on, for the '#' header lines.

blas_desc(torch) returns one phrase:
  "OpenBLAS core Haswell, 1 thread(s) (/usr/lib/.../libopenblas.so.0; config ...)" when an
  OpenBLAS is mapped into the process (Debian's python3-torch), or
  "BLAS mkl (linked into torch; no OpenBLAS in the process), CPU capability AVX512" otherwise
  (PyPI's torch, which links MKL statically).
The benchmark scripts compare the 'OpenBLAS core NAME' phrases of both sides, so the phrase
appears only when the process really has an OpenBLAS.
"""
import ctypes
import os


def _config_field(torch, key):
    for line in torch.__config__.show().replace(",", "\n").splitlines():
        line = line.strip().lstrip("- ")
        if line.startswith("Build settings:"):
            line = line[len("Build settings:"):].strip()
        if line.startswith(key):
            return line[len(key):].lstrip(":= ").strip()
    return "?"


def blas_desc(torch):
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "blas" in os.path.basename(path) and path.startswith("/"):
                libs.add(path)
    for path in sorted(libs):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return "OpenBLAS core %s, %d thread(s) (%s; config %s)" % (
                lib.openblas_get_corename().decode(), lib.openblas_get_num_threads(), path,
                lib.openblas_get_config().decode())
        except (OSError, AttributeError):
            continue
    return "BLAS %s (linked into torch; no OpenBLAS in the process), CPU capability %s" % (
        _config_field(torch, "BLAS_INFO"), _config_field(torch, "CPU capability usage"))
