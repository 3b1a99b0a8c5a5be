# The string kernels of selector/_eval.pyx (set membership, CONTAINS, STARTSWITH, ENDSWITH over
# byte views): included by _eval.pyx, where its cimports and the StrView/StrSet types of _eval.pxd
# are in scope. Not a module of its own: the evaluation loop inlines these calls.

cdef inline uint64_t fnv1a(const char* s, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <unsigned char>s[i]) * 1099511628211ULL
    return h


cdef bint set_contains(const StrSet* st, StrView v) noexcept nogil:
    cdef uint64_t h, w
    cdef int32_t j
    cdef bint found = False
    if st.n_small >= 0:
        if v.n > 8:
            return False
        w = window_of(v.s, v.n)
        for j in range(st.n_small):
            found |= (st.small_len[j] == v.n) & (st.small_word[j] == w)
        return found
    h = fnv1a(v.s, v.n)
    cdef Py_ssize_t k = <Py_ssize_t>(h & <uint64_t>st.mask)
    while st.buckets[k].s != NULL:
        if st.hashes[k] == h and st.buckets[k].n == v.n and memcmp(st.buckets[k].s, v.s, v.n) == 0:
            return True
        k = (k + 1) & st.mask
    return False


cdef inline uint64_t window_of(const char* s, Py_ssize_t n) noexcept nogil:
    """The first ``n`` (<= 8) bytes of ``s`` as one integer, first byte highest."""
    cdef uint64_t w = 0
    cdef Py_ssize_t i
    for i in range(n):
        w = (w << 8) | <uint8_t>s[i]
    return w


cdef inline bint contains_short(StrView hay, StrView needle, uint64_t target) noexcept nogil:
    """``contains`` for a needle of 1..8 bytes in a short value: the last needle.n bytes slide
    through one 64-bit window compared with the needle (``target``, see window_of), with no
    branch per byte, which random data would mispredict."""
    cdef uint64_t mask = 0xFFFFFFFFFFFFFFFFULL if needle.n == 8 else (1ULL << (8 * needle.n)) - 1
    cdef uint64_t w = window_of(hay.s, needle.n - 1)
    cdef Py_ssize_t i
    cdef bint found = False
    for i in range(needle.n - 1, hay.n):
        w = ((w << 8) | <uint8_t>hay.s[i]) & mask
        found |= w == target
    return found


cdef bint contains(StrView hay, StrView needle) noexcept nogil:
    cdef const char* p = hay.s
    cdef const char* end = hay.s + hay.n - needle.n
    if needle.n > hay.n:
        return False
    if hay.n <= 32 and needle.n <= 8:
        return contains_short(hay, needle, window_of(needle.s, needle.n))
    while p <= end:
        p = <const char*>memchr(p, needle.s[0], end - p + 1)
        if p == NULL:
            return False
        if memcmp(p, needle.s, needle.n) == 0:
            return True
        p += 1
    return False


cdef inline bint same_bytes(const char* a, const char* b, Py_ssize_t n) noexcept nogil:
    """memcmp(a, b, n) == 0; for short n a branch-free loop (no call, no early exit)."""
    cdef Py_ssize_t i
    cdef uint8_t diff = 0
    if n > 16:
        return memcmp(a, b, n) == 0
    for i in range(n):
        diff |= <uint8_t>a[i] ^ <uint8_t>b[i]
    return diff == 0


cdef inline bint string_match(uint8_t op, StrView v, StrView pat) noexcept nogil:
    if op == OP_CONTAINS or op == OP_NOT_CONTAINS:
        return contains(v, pat)
    if pat.n > v.n:
        return False
    if op == OP_STARTSWITH or op == OP_NOT_STARTSWITH:
        return same_bytes(v.s, pat.s, pat.n)
    return same_bytes(v.s + v.n - pat.n, pat.s, pat.n)
