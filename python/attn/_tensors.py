"""NumPy arrays as the API's tensors: element strides, no copy when the last dim is contiguous.

Every float tensor of attn has its last dimension contiguous; the other dimensions may have
any non-negative element stride (0 broadcasts an input). An array whose last dimension is
not contiguous, which has a negative stride, a stride that is not a whole number of elements,
or another dtype than the one needed, is copied first (copies counts those copies)."""
import numpy as np

copies = 0  # arrays copied so far to meet the API's layout rules (read by the tests)

F32 = np.dtype(np.float32)


def _fits(a):
    item = a.dtype.itemsize
    for n, s in zip(a.shape, a.strides):
        if n > 1 and (s < 0 or s % item):
            return False
    return a.ndim == 0 or a.shape[-1] <= 1 or a.strides[-1] == item


def prepare(a, dtype=F32, name="array"):
    """a as an array of dtype whose layout the API can take (a itself when possible)."""
    global copies
    if not isinstance(a, np.ndarray):
        a = np.asarray(a)
        if a.dtype != dtype:
            a = a.astype(dtype)
        return np.ascontiguousarray(a)
    if a.dtype == dtype and _fits(a):
        return a
    copies += 1
    return np.ascontiguousarray(a, dtype=dtype)


def elem_strides(a):
    """Element strides of a (0 for dims of size 1, which are never stepped)."""
    item = a.dtype.itemsize
    return tuple(0 if n <= 1 else s // item for n, s in zip(a.shape, a.strides))


def ptr(a):
    """The address of a's first element (None for None)."""
    return None if a is None else a.ctypes.data


def like_strides(a, dtype=F32):
    """A new array with a's shape and exactly a's element strides (its gradient buffer)."""
    st = elem_strides(a)
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, st)) if a.size else 0
    buf = np.empty(max(span, 1), dtype=dtype)
    item = np.dtype(dtype).itemsize
    return np.lib.stride_tricks.as_strided(buf, a.shape, tuple(s * item for s in st),
                                           writeable=True)


def injective(a):
    """True if distinct elements of a occupy distinct memory (no 0 or overlapping strides)."""
    dims = sorted((s, n) for n, s in zip(a.shape, elem_strides(a)) if n > 1)
    extent = 1
    for s, n in dims:
        if s < extent:
            return False
        extent += (n - 1) * s
    return True
