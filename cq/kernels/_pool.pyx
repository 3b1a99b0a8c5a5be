"""Cython engine of the decoder's output memory: freed column buffers kept for the next decode (twin: ``_pool_py.py``).

The buffers' layout and growth (``GBuf``) are in ``_pool.pxd``; the decoder (``_decode.pyx``) and the
inflater (``_inflate.pyx``) take their output memory here and hand it to numpy without a copy.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free
from libc.string cimport memset

cnp.import_array()


# ------------------------------------------------------------------ reused output memory
# A decoded batch's buffers are fresh memory: the kernel faults in and zeroes each page the
# first time it is written, which for a large batch cost more than the decode itself. So the
# buffers of freed arrays are kept (at most POOL_BYTES in all, docs/data-path.md) and handed
# to the next decode, best fit for the size the same buffer took per row last time. The pool
# is touched only with the GIL held (no Python code runs in between: the GIL is its lock).
DEF POOL_BYTES = 128 << 20
DEF POOL_MIN = 1 << 16       # smaller buffers are cheap to malloc: not kept
cdef list _pool = []         # [(capacity, address)]
cdef int64_t _pool_bytes = 0


cdef void _pool_put(void* p, int64_t cap) except *:
    global _pool_bytes
    if p == NULL:
        return
    if cap < POOL_MIN or _pool_bytes + cap > POOL_BYTES:
        free(p)
        return
    _pool.append((cap, <size_t>p))
    _pool_bytes += cap


cdef void _pool_get(GBuf* g, int64_t want) except *:
    # Give the empty ``g`` the pooled buffer that best fits ``want`` bytes (the smallest that
    # holds them, else the largest); nothing when the pool is empty or want is small.
    global _pool_bytes
    cdef Py_ssize_t i, best = -1, n = len(_pool)
    cdef int64_t cap, best_cap = 0
    if n == 0 or want < POOL_MIN:
        return
    for i in range(n):
        cap = (<tuple>_pool[i])[0]
        if best < 0 or (want <= cap < best_cap if best_cap >= want else cap > best_cap):
            best = i
            best_cap = cap
    entry = _pool.pop(best)
    _pool_bytes -= best_cap
    g.p = <uint8_t*><size_t>(<tuple>entry)[1]
    g.cap = best_cap
    g.n = 0


def pool_bytes():
    """Bytes of freed decode buffers kept for reuse (at most 128 MiB)."""
    return _pool_bytes


cdef class _Owned:
    """Owner of a malloc'd buffer handed to numpy without a copy; freed into the pool."""
    cdef void* p
    cdef int64_t cap

    def __dealloc__(self):
        _pool_put(self.p, self.cap)


cdef object _take(GBuf* g, object dtype, int64_t count):
    # The buffer as a numpy array of ``count`` items (owning the memory), g emptied.
    cdef cnp.npy_intp dims[1]
    cdef _Owned owner
    cdef cnp.ndarray arr
    if g.p == NULL or count == 0:
        _pool_put(g.p, g.cap)
        g.p = NULL
        g.n = g.cap = 0
        return np.zeros(count, dtype=dtype)
    dims[0] = count
    arr = cnp.PyArray_SimpleNewFromData(1, dims, cnp.dtype(dtype).num, g.p)
    owner = _Owned()
    owner.p = g.p
    owner.cap = g.cap
    cnp.set_array_base(arr, owner)
    g.p = NULL
    g.n = g.cap = 0
    return arr


cdef object _pooled_zeros(int64_t count, object dtype):
    # np.zeros(count, dtype) in a pooled buffer when one fits (hot pages: no faults to zero them)
    cdef GBuf g
    cdef int64_t nbytes = count * np.dtype(dtype).itemsize
    memset(&g, 0, sizeof(GBuf))
    _pool_get(&g, nbytes)
    if g.cap < nbytes:
        _pool_put(g.p, g.cap)
        return np.zeros(count, dtype=dtype)
    memset(g.p, 0, nbytes)
    g.n = nbytes
    return _take(&g, dtype, count)
