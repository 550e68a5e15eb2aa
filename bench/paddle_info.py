"""What a Paddle process runs on, for the '#' header lines of the Paddle peer scripts.

paddle_info(paddle) names Paddle's version and commit, its MKL and oneDNN build flags, whether
oneDNN kernels are on (FLAGS_use_mkldnn), the oneDNN library mapped into the process with its
version and the ISA it dispatches to (dnnl_get_effective_cpu_isa), the MKL library, the intra-op
thread settings and the CPU's AVX-512 / AMX flags.  Run as a script it prints that line.

mkl_env() (call before paddle is imported): on an AMD CPU sets MKL_DEBUG_CPU_TYPE=5 unless the
environment sets it.  Paddle's wheel carries MKL 2019.0.5 (libmklml_intel), which takes its slow
non-Intel code path on AMD; 5 selects its AVX2 kernels, Paddle's fastest CPU configuration there
(measured: CTR-DNN static f32 at batch 512, about 2x).  No effect on Intel CPUs.
"""
import ctypes
import os

# dnnl_cpu_isa_t values of oneDNN 3.x (include/oneapi/dnnl/dnnl_types.h)
ISA = {0x1: "sse41", 0x3: "avx", 0x7: "avx2", 0xf: "avx2_vnni", 0x1f: "avx2_vnni_2", 0x27: "avx512_core",
       0x67: "avx512_core_vnni", 0xe7: "avx512_core_bf16", 0x1ef: "avx10_1_512 (avx512_core_fp16)",
       0xfe7: "avx512_core_amx", 0x1fef: "avx10_1_512_amx_fp16"}


def mkl_env():
    try:
        with open("/proc/cpuinfo") as f:
            amd = any(line.startswith("vendor_id") and "AuthenticAMD" in line for line in f)
    except OSError:
        amd = False
    if amd:
        os.environ.setdefault("MKL_DEBUG_CPU_TYPE", "5")


def _mapped(word):
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if word in os.path.basename(path) and path.startswith("/"):
                libs.add(path)
    return sorted(libs)


def onednn_info():
    for path in _mapped("dnnl"):
        try:
            lib = ctypes.CDLL(path)

            class Ver(ctypes.Structure):
                _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                            ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]

            lib.dnnl_version.restype = ctypes.POINTER(Ver)
            v = lib.dnnl_version().contents
            isa = lib.dnnl_get_effective_cpu_isa()
            return "oneDNN %d.%d.%d (%s) isa %s" % (v.major, v.minor, v.patch, os.path.basename(path),
                                                      ISA.get(isa, "0x%x" % isa))
        except (OSError, AttributeError):
            continue
    return "oneDNN not mapped"


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    fl = line.split(":", 1)[1].split()
                    keep = [x for x in fl if x in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                                                   "amx_bf16", "amx_tile")]
                    return " ".join(keep) or "no avx2"
    except OSError:
        pass
    return "?"


def paddle_info(paddle):
    core = paddle.base.core
    v = paddle.version
    mkl = [os.path.basename(m) for m in _mapped("mkl")]
    if not mkl:  # loaded at the first matrix product: name the one the wheel carries
        libs = os.path.join(os.path.dirname(paddle.__file__), "libs")
        mkl = ["%s (not loaded yet)" % f for f in sorted(os.listdir(libs)) if "mkl" in f] if os.path.isdir(libs) else []
    try:
        flag = paddle.get_flags(["FLAGS_use_mkldnn"])["FLAGS_use_mkldnn"]
    except (ValueError, KeyError):
        flag = "?"
    return ("paddle %s (commit %s), with_mkl %s, compiled with oneDNN %s, FLAGS_use_mkldnn %s, %s, MKL %s, "
            "OMP_NUM_THREADS=%s MKL_NUM_THREADS=%s MKL_DEBUG_CPU_TYPE=%s, CPU flags: %s" % (
                paddle.__version__, str(v.commit)[:10], v.with_mkl, core.is_compiled_with_onednn(), flag,
                onednn_info(), ",".join(mkl) or "none found",
                os.environ.get("OMP_NUM_THREADS", "(unset)"), os.environ.get("MKL_NUM_THREADS", "(unset)"),
                os.environ.get("MKL_DEBUG_CPU_TYPE", "(unset)"), cpu_flags()))


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    mkl_env()
    import paddle

    print(paddle_info(paddle))
