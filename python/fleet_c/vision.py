"""paddle.vision: only what the seeds' programs call; models and datasets are not provided."""

_backend = "pil"


def set_image_backend(backend):
    """Recorded only: Fleet reads no images (a program feeds NumPy arrays)."""
    global _backend
    if backend not in ("pil", "cv2"):
        raise ValueError("set_image_backend: expected 'pil' or 'cv2', got %r" % (backend,))
    _backend = backend


def get_image_backend():
    return _backend
