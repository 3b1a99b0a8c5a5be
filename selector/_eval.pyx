"""Cython engine of selector evaluation (the contract is in _eval.pxd).

Semantics are the broker's (docs/selector-semantics.md#evaluation,
docs/selector-semantics.md#comparison-and-coercion), spelled out in Python in
``_eval_py.py`` and ``javalang.py``; this module implements the same rules in
C over UTF-8 string views, so one loop serves Python dicts (``evaluate``,
``evaluate_many``) and Arrow string buffers (``evaluate_columns``, which runs
without the GIL).
"""
import unicodedata
from collections.abc import Mapping

import numpy as np

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItemWithError
from cpython.ref cimport PyObject
from libc.math cimport INFINITY, NAN, isnan, signbit
from libc.stdint cimport INT32_MIN, INT64_MIN, int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc, strtod
from libc.string cimport memchr, memcmp, memcpy, memset

from .errors import comparison_error
from .javalang import Long
from .opcodes import COMPARISON_SYMBOLS

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

cdef enum:
    SMALL = 32          # programs up to this many nodes / slots use stack scratch space

cdef int64_t INT_MIN = INT32_MIN
cdef int64_t LONG_MIN = INT64_MIN
cdef const char* EMPTY = ""


def _digit_table():
    table = bytearray(b"\xff" * 0x10000)
    for cp in range(0x10000):
        d = unicodedata.decimal(chr(cp), -1)
        if d >= 0:
            table[cp] = d
    return bytes(table)


cdef bytes DIGITS = _digit_table()


# -- Java number grammars over UTF-8 -------------------------------------------------------------

cdef bint parse_integer(const char* s, Py_ssize_t n, const uint8_t* digits, bint wide,
                        int64_t* out) noexcept nogil:
    """Integer.parseInt (wide=0) / Long.parseLong (wide=1): sign, then BMP Nd digits."""
    cdef Py_ssize_t i = 0
    cdef bint negative = False
    cdef uint64_t limit, value = 0
    cdef uint32_t cp
    cdef unsigned char c
    cdef int d
    if n > 0 and (s[0] == c'+' or s[0] == c'-'):
        negative = s[0] == c'-'
        i = 1
    if i >= n:
        return False
    if wide:
        limit = (<uint64_t>1 << 63) if negative else ((<uint64_t>1 << 63) - 1)
    else:
        limit = (<uint64_t>1 << 31) if negative else ((<uint64_t>1 << 31) - 1)
    while i < n:
        c = <unsigned char>s[i]
        if c < 0x80:
            if c < c'0' or c > c'9':
                return False
            d = c - c'0'
            i += 1
        else:
            # Java reads UTF-16 units: only BMP characters can be digits.
            if c >= 0xE0 and c < 0xF0 and i + 2 < n:
                cp = ((c & 0x0F) << 12) | ((<unsigned char>s[i + 1] & 0x3F) << 6) | (
                    <unsigned char>s[i + 2] & 0x3F)
                i += 3
            elif c >= 0xC0 and c < 0xE0 and i + 1 < n:
                cp = ((c & 0x1F) << 6) | (<unsigned char>s[i + 1] & 0x3F)
                i += 2
            else:
                return False
            d = digits[cp]
            if d == 255:
                return False
        if value > (limit - d) // 10:
            return False
        value = value * 10 + d
    out[0] = -<int64_t>value if negative else <int64_t>value
    return True


cdef inline bint is_digit(char c) noexcept nogil:
    return c >= c'0' and c <= c'9'


cdef inline bint is_hex(char c) noexcept nogil:
    return is_digit(c) or (c >= c'a' and c <= c'f') or (c >= c'A' and c <= c'F')


cdef bint parse_double(const char* s, Py_ssize_t n, double* out) noexcept nogil:
    """Double.valueOf: trim chars <= U+0020, then Java's decimal/hex/NaN/Infinity grammar."""
    cdef Py_ssize_t i = 0, j, k, start, end, digits = 0, sig = 0, frac = 0, exp10 = 0
    cdef char buf[64]
    cdef bint negative = False, exp_negative = False
    cdef uint64_t mant = 0
    cdef double value
    while i < n and <unsigned char>s[i] <= 0x20:
        i += 1
    while n > i and <unsigned char>s[n - 1] <= 0x20:
        n -= 1
    if i >= n:
        return False
    j = i
    if s[j] == c'+' or s[j] == c'-':
        negative = s[j] == c'-'
        j += 1
    if n - j == 3 and memcmp(s + j, b"NaN", 3) == 0:
        out[0] = NAN
        return True
    if n - j == 8 and memcmp(s + j, b"Infinity", 8) == 0:
        out[0] = -INFINITY if negative else INFINITY
        return True
    k = j
    if n - j > 2 and s[j] == c'0' and (s[j + 1] == c'x' or s[j + 1] == c'X'):
        k = j + 2
        while k < n and is_hex(s[k]):
            k += 1
            digits += 1
        if k < n and s[k] == c'.':
            k += 1
            while k < n and is_hex(s[k]):
                k += 1
                digits += 1
        if digits == 0 or k >= n or (s[k] != c'p' and s[k] != c'P'):
            return False
    else:
        # Decimal. Small cases take the exact fast path (an integer below 2**53 times or
        # divided by an exact power of ten is one correctly rounded operation, as in
        # Java's FloatingDecimal); everything else goes to strtod.
        while k < n and is_digit(s[k]):
            if mant or s[k] != c'0':
                sig += 1
            if sig <= 15:
                mant = mant * 10 + (s[k] - c'0')
            k += 1
            digits += 1
        if k < n and s[k] == c'.':
            k += 1
            while k < n and is_digit(s[k]):
                if mant or s[k] != c'0':
                    sig += 1
                if sig <= 15:
                    mant = mant * 10 + (s[k] - c'0')
                k += 1
                digits += 1
                frac += 1
        if digits == 0:
            return False
        if k < n and (s[k] == c'e' or s[k] == c'E'):
            k += 1
            if k < n and (s[k] == c'+' or s[k] == c'-'):
                exp_negative = s[k] == c'-'
                k += 1
            start = k
            while k < n and is_digit(s[k]):
                if k - start < 6:
                    exp10 = exp10 * 10 + (s[k] - c'0')
                k += 1
            if k == start:
                return False
            if k - start >= 6:
                sig = 99  # huge exponent: leave it to strtod
        end = k
        if k < n and (s[k] == c'f' or s[k] == c'F' or s[k] == c'd' or s[k] == c'D'):
            k += 1
        if k != n:
            return False
        exp10 = (-exp10 if exp_negative else exp10) - frac
        if sig <= 15 and -22 <= exp10 <= 22:
            value = <double>mant
            if exp10 >= 0:
                value = value * POW10[exp10]
            else:
                value = value / POW10[-exp10]
            out[0] = -value if negative else value
            return True
        return strtod_range(s + i, end - i, buf, out)
    # exponent (mandatory for hex, present for decimal here)
    k += 1
    if k < n and (s[k] == c'+' or s[k] == c'-'):
        k += 1
    start = k
    while k < n and is_digit(s[k]):
        k += 1
    if k == start:
        return False
    end = k
    if k < n and (s[k] == c'f' or s[k] == c'F' or s[k] == c'd' or s[k] == c'D'):
        k += 1
    if k != n:
        return False
    return strtod_range(s + i, end - i, buf, out)


cdef bint strtod_range(const char* s, Py_ssize_t n, char* buf, double* out) noexcept nogil:
    # The text is validated; strtod (correctly rounded, hex floats included) converts it.
    cdef char* tmp = buf
    if n >= 64:
        tmp = <char*>malloc(n + 1)
        if tmp == NULL:
            return False
    memcpy(tmp, s, n)
    tmp[n] = 0
    out[0] = strtod(tmp, NULL)
    if tmp != buf:
        free(tmp)
    return True


cdef double POW10[23]
for _k in range(23):
    POW10[_k] = float(10 ** _k)


cdef inline bint parse_boolean(const char* s, Py_ssize_t n) noexcept nogil:
    return (n == 4 and (s[0] | 0x20) == c't' and (s[1] | 0x20) == c'r' and (s[2] | 0x20) == c'u'
            and (s[3] | 0x20) == c'e')


cdef inline int dcmp(double a, double b) noexcept nogil:
    """Double.compare: -0.0 < 0.0; NaN equals NaN and is above +Infinity."""
    cdef int an, bn
    if a < b:
        return -1
    if a > b:
        return 1
    an = isnan(a)
    bn = isnan(b)
    if an or bn:
        return (an != 0) - (bn != 0)
    return (signbit(b) != 0) - (signbit(a) != 0)


cdef inline int icmp(int64_t a, int64_t b) noexcept nogil:
    return (a > b) - (a < b)


# -- conversions with the per-slot cache ---------------------------------------------------------

cdef bint as_int(const Value* v, Conv* conv, const uint8_t* digits, bint wide,
                 int64_t* out) noexcept nogil:
    cdef Conv* c
    cdef int64_t x
    if v.slot < 0:
        return parse_integer(v.s.s, v.s.n, digits, wide, out)
    c = &conv[v.slot]
    if wide:
        if c.i64_state == 0:
            c.i64_state = 1 if parse_integer(v.s.s, v.s.n, digits, True, &c.i64) else 2
        out[0] = c.i64
        return c.i64_state == 1
    if c.i32_state == 0:
        if parse_integer(v.s.s, v.s.n, digits, False, &x):
            c.i32_state = 1
            c.i32 = <int32_t>x
        else:
            c.i32_state = 2
    out[0] = c.i32
    return c.i32_state == 1


cdef bint as_double(const Value* v, Conv* conv, double* out) noexcept nogil:
    cdef Conv* c
    if v.slot < 0:
        return parse_double(v.s.s, v.s.n, out)
    c = &conv[v.slot]
    if c.f64_state == 0:
        c.f64_state = 1 if parse_double(v.s.s, v.s.n, &c.f64) else 2
    out[0] = c.f64
    return c.f64_state == 1


cdef inline double number(const Value* v) noexcept nogil:
    return v.d if v.tag == T_DOUBLE else <double>v.i


cdef bint compare(const CProgram* p, const Value* l, const Value* r, Conv* conv,
                  int* out) noexcept nogil:
    """The broker's compareTo with its coercions (docs/selector-semantics.md#comparison-and-coercion); False where it throws."""
    cdef int64_t x
    cdef double d
    cdef Py_ssize_t m
    cdef uint8_t L = l.tag, R = r.tag
    if L == R:
        if L == T_DOUBLE:
            out[0] = dcmp(l.d, r.d)
        elif L == T_STR:
            m = l.s.n if l.s.n < r.s.n else r.s.n
            out[0] = memcmp(l.s.s, r.s.s, m)
            if out[0] == 0:
                out[0] = icmp(l.s.n, r.s.n)
        else:
            out[0] = icmp(l.i, r.i)
        return True
    if L == T_BOOL:
        out[0] = -1
        return R != T_STR       # Boolean left of a String: ClassCastException
    if R == T_BOOL:
        if L == T_STR:
            out[0] = icmp(parse_boolean(l.s.s, l.s.n), r.i)
        else:
            out[0] = -1
        return True
    if L == T_STR:
        if R == T_DOUBLE:
            if not as_double(l, conv, &d):
                return False
            out[0] = dcmp(d, r.d)
        else:
            if not as_int(l, conv, p.digits, R == T_LONG, &x):
                return False
            out[0] = icmp(x, r.i)
        return True
    if R == T_STR:
        if L == T_DOUBLE:
            if not as_double(r, conv, &d):
                return False
            out[0] = dcmp(l.d, d)
        else:
            if not as_int(r, conv, p.digits, L == T_LONG, &x):
                return False
            out[0] = icmp(l.i, x)
        return True
    if L == T_DOUBLE or R == T_DOUBLE:
        out[0] = dcmp(number(l), number(r))
    else:
        out[0] = icmp(l.i, r.i)
    return True


# -- strings: set membership and CONTAINS / STARTSWITH / ENDSWITH ------------------------------

include "_eval_strings.pxi"


# -- the evaluation loop -------------------------------------------------------------------------

cdef inline void set_bool(Value* v, bint b) noexcept nogil:
    v.tag = T_BOOL
    v.i = b
    v.slot = -1


cdef inline void set_null(Value* v) noexcept nogil:
    v.tag = T_NULL
    v.slot = -1


cdef inline int step(const CProgram* p, const Node* node, Value* v, const Value* l, const Value* r,
                     Conv* conv) noexcept nogil:
    """Compute one non-leaf node from its children's values ``l`` and ``r``; -1 where the broker throws.

    Guards have already been applied: the left operand of AND is not FALSE, of
    OR not TRUE, of an ordering comparison not NULL.
    """
    cdef uint8_t op = node.op
    cdef int c
    cdef double x, y
    if op == OP_BOOLCAST:
        if l.tag == T_NULL or l.tag == T_BOOL:
            v[0] = l[0]
        else:
            set_bool(v, False)      # any String, even "true"
    elif op == OP_NOT:
        if l.tag == T_NULL:
            set_null(v)
        else:
            set_bool(v, not l.i)
    elif op == OP_NEG:
        v.slot = -1
        v.tag = l.tag
        if l.tag == T_INT:
            v.i = l.i if l.i == INT_MIN else -l.i
        elif l.tag == T_LONG:
            v.i = l.i if l.i == LONG_MIN else -l.i
        elif l.tag == T_DOUBLE:
            v.d = -l.d
        else:
            v.tag = T_NULL          # NULL, Boolean and String negate to NULL
    elif op == OP_AND:
        if r.tag == T_BOOL and not r.i:
            set_bool(v, False)
        elif r.tag == T_NULL or l.tag == T_NULL:
            set_null(v)
        else:
            set_bool(v, True)
    elif op == OP_OR:
        if r.tag == T_BOOL and r.i:
            set_bool(v, True)
        elif r.tag == T_NULL or l.tag == T_NULL:
            set_null(v)
        else:
            set_bool(v, False)
    elif op == OP_EQ:
        if l.tag == T_NULL:
            if r.tag == T_NULL:
                set_bool(v, True)
            else:
                set_null(v)
        elif r.tag == T_NULL:
            set_bool(v, False)
        elif l.tag == T_STR and r.tag == T_STR:
            set_bool(v, l.s.n == r.s.n and memcmp(l.s.s, r.s.s, l.s.n) == 0)
        else:
            if not compare(p, l, r, conv, &c):
                return -1
            set_bool(v, c == 0)
    elif op == OP_ISNULL:
        set_bool(v, l.tag == T_NULL)
    elif op <= OP_LE:
        if r.tag == T_NULL:
            set_null(v)
        else:
            if l.tag == T_STR and r.tag == T_STR:
                # Two strings are ordered as doubles, or the broker throws.
                if not as_double(l, conv, &x) or not as_double(r, conv, &y):
                    return -1
                c = dcmp(x, y)
            elif not compare(p, l, r, conv, &c):
                return -1
            if op == OP_GT:
                set_bool(v, c > 0)
            elif op == OP_GE:
                set_bool(v, c >= 0)
            elif op == OP_LT:
                set_bool(v, c < 0)
            else:
                set_bool(v, c <= 0)
    elif op == OP_IN or op == OP_NOT_IN:
        if l.tag != T_STR:
            set_null(v)
        else:
            set_bool(v, set_contains(&p.sets[node.arg], l.s) == (op == OP_IN))
    else:
        # CONTAINS family: NULL and non-strings are FALSE, negated or not.
        if l.tag != T_STR:
            set_bool(v, False)
        else:
            set_bool(v, string_match(op, l.s, p.consts[node.arg].s) == (op <= OP_ENDSWITH))
    return 0


cdef inline bint decides(uint8_t guard, const Value* v) noexcept nogil:
    """Whether a value, guarded so, decides its parent."""
    # "&" rather than "and": no branch on the (unpredictable) value, only on the guard.
    if guard == GUARD_FALSE:
        return (v.tag == T_BOOL) & (v.i == 0)
    if guard == GUARD_TRUE:
        return (v.tag == T_BOOL) & (v.i != 0)
    return (guard == GUARD_NULL) & (v.tag == T_NULL)


cdef int run(const CProgram* p, const StrView* slots, Conv* conv, Value* vals) noexcept nogil:
    """Evaluate one message; returns R_FALSE, R_TRUE, R_UNKNOWN or R_ERROR."""
    cdef int32_t failed
    return run_traced(p, slots, conv, vals, &failed)


cdef inline int run_traced(const CProgram* p, const StrView* slots, Conv* conv, Value* vals,
                           int32_t* failed) noexcept nogil:
    """:func:`run`, and on R_ERROR the index of the node that threw in ``failed`` (its
    operands are still in ``vals``, for the error message)."""
    cdef int32_t i = 0, j, n = p.n_nodes
    cdef const Node* node
    cdef Value* v
    while i < n:
        node = &p.nodes[i]
        v = &vals[i]
        if node.op == OP_PROP:
            v.s = slots[node.arg]
            v.tag = T_STR if v.s.s != NULL else T_NULL
            v.slot = node.arg if p.cached[node.arg] else -1
        elif node.op == OP_CONST:
            v[0] = p.consts[node.arg]
        elif step(p, node, v, &vals[node.a], &vals[node.b] if node.b >= 0 else NULL, conv) < 0:
            failed[0] = i
            return R_ERROR
        # Short circuits: a decided parent takes this value; skip the rest of its subtree.
        j = i
        while decides(p.nodes[j].guard, &vals[j]):
            vals[p.nodes[j].parent] = vals[j]
            j = p.nodes[j].parent
        i = j + 1
    return code_of(&vals[n - 1])


cdef inline int code_of(const Value* v) noexcept nogil:
    if v.tag == T_NULL:
        return R_UNKNOWN
    return R_TRUE if v.i else R_FALSE


ctypedef struct Column:
    # One Arrow StringArray (int32 offsets) holding a property; offsets NULL if no row has it.
    const uint8_t* valid    # validity bitmap or NULL (no nulls)
    const int32_t* offsets
    const char* data
    Py_ssize_t first        # the array's offset into its buffers


cdef enum:
    CHUNK = 256             # rows evaluated together by run_columns (fewer for huge programs)
    SCRATCH_VALUES = 1 << 20  # cap on nodes * rows-per-chunk (40 MB of values)


cdef inline const Value* values_of(const CProgram* p, const Value* vals, int32_t i, Py_ssize_t chunk,
                                   Py_ssize_t* stride) noexcept nogil:
    """A node's per-row values in run_columns; a constant is one value read with stride 0."""
    if p.nodes[i].op == OP_CONST:
        stride[0] = 0
        return &p.consts[p.nodes[i].arg]
    stride[0] = 1
    return vals + <Py_ssize_t>i * chunk


cdef inline bint cell_null(const Column* col, Py_ssize_t idx) noexcept nogil:
    """Whether the property is absent at buffer index ``idx`` (row + the array's offset)."""
    return col.offsets == NULL or (col.valid != NULL and not (col.valid[idx >> 3] >> (idx & 7)) & 1)


cdef inline void read_cell(const Column* col, Py_ssize_t row, int32_t slot, Value* v) noexcept nogil:
    """A property's value in one row of its Arrow column (T_NULL where null or absent)."""
    cdef Py_ssize_t idx = row + col.first
    v.slot = slot
    if cell_null(col, idx):
        v.tag = T_NULL
    else:
        v.tag = T_STR
        v.s.s = col.data + col.offsets[idx]
        v.s.n = col.offsets[idx + 1] - col.offsets[idx]


ctypedef struct Scratch:
    # Work space of run_columns for one program (n nodes, s slots).
    Py_ssize_t chunk        # rows per chunk: CHUNK, fewer when n * CHUNK would exceed SCRATCH_VALUES
    Value* vals             # n * chunk values, node by node
    int32_t* sels           # (n + 1) * chunk row indices; the last chunk hold 0, 1, ..., chunk-1
    const int32_t** sel_ptr # n: the rows each node is computed for ...
    int32_t* nsel           # n: ... and how many
    int32_t* stack          # n: explicit traversal stack
    uint8_t* phases         # n: 0 before, 1 after the first, 2 after the second child
    Conv* conv              # chunk * s conversion caches
    uint8_t* failed         # chunk: the row's evaluation threw


cdef void run_string_match(uint8_t op, const Column* col, Py_ssize_t base, const int32_t* sel,
                           int32_t count, Value* v, StrView pat) noexcept nogil:
    """A CONTAINS-family node whose operand is a property, for the selected rows of a chunk.

    The operator is decided once, outside the row loop; NULL (absent) is FALSE, negated or
    not, and otherwise the negated forms flip the result.
    """
    cdef int32_t t, row
    cdef Py_ssize_t idx, start, n
    cdef bint hit
    cdef bint negate = op > OP_ENDSWITH
    cdef uint8_t kind = op - 3 if negate else op
    cdef bint short_needle = pat.n <= 8
    cdef uint64_t target = window_of(pat.s, pat.n) if short_needle else 0
    cdef StrView cell
    for t in range(count):
        row = sel[t]
        idx = base + row + col.first
        v[row].tag = T_BOOL
        v[row].slot = -1
        if cell_null(col, idx):
            v[row].i = 0
            continue
        start = col.offsets[idx]
        n = col.offsets[idx + 1] - start
        if n < pat.n:
            hit = False
        elif kind == OP_STARTSWITH:
            hit = same_bytes(col.data + start, pat.s, pat.n)
        elif kind == OP_ENDSWITH:
            hit = same_bytes(col.data + start + n - pat.n, pat.s, pat.n)
        elif short_needle and n <= 32:
            cell.s = col.data + start
            cell.n = n
            hit = contains_short(cell, pat, target)
        else:
            cell.s = col.data + start
            cell.n = n
            hit = contains(cell, pat)
        v[row].i = hit != negate


cdef int run_columns(const CProgram* p, const Column* cols, Py_ssize_t length, int8_t* out,
                     Scratch* w) noexcept nogil:
    """Evaluate Arrow rows a chunk at a time, one node at a time (column-at-a-time).

    Each node is computed for all rows of the chunk that reach it: children of
    a node see its selection of rows, except the right operand of a guarded
    node, which sees only the rows its left operand did not decide, exactly as
    the row-at-a-time walk would. A row whose evaluation throws is marked and
    reported as R_ERROR. ``vals`` holds w.chunk values per node, ``sels`` w.chunk
    row indices per node (only right operands of guarded nodes use theirs).
    """
    cdef int32_t n = p.n_nodes, root = n - 1, node_i, sp, t, m, k, row
    cdef int32_t* sel
    cdef int32_t* sel_of_node
    cdef Py_ssize_t base, idx
    cdef const Node* node
    cdef const Node* parent
    cdef Value* v
    cdef const Value* lv
    cdef const Value* rv
    cdef const Column* col
    cdef Value* vals = w.vals
    cdef int32_t* sels = w.sels
    cdef const int32_t** sel_ptr = w.sel_ptr
    cdef int32_t* nsel = w.nsel
    cdef int32_t* stack = w.stack
    cdef uint8_t* phases = w.phases
    cdef Conv* conv = w.conv
    cdef uint8_t* failed = w.failed
    cdef Py_ssize_t chunk = w.chunk
    cdef const int32_t* identity = sels + <Py_ssize_t>n * chunk
    cdef Py_ssize_t lstride, rstride
    cdef uint8_t g
    cdef int32_t arg
    cdef Value cell
    cdef const Value* lv_row
    cdef const Value* rv_row
    cdef bint decided
    cdef int64_t x64, want
    cdef double xd
    cdef int c
    base = 0
    while base < length:
        m = <int32_t>(chunk if length - base > chunk else length - base)
        if p.any_cached:
            memset(conv, 0, <size_t>m * p.n_slots * sizeof(Conv))
        memset(failed, 0, m)
        sel_ptr[root] = identity
        nsel[root] = m
        sp = 0
        stack[0] = root
        phases[root] = 0
        while sp >= 0:
            node_i = stack[sp]
            node = &p.nodes[node_i]
            if phases[node_i] == 0:
                phases[node_i] = 1
                if node.a >= 0 and not p.fused[node_i] and p.nodes[node.a].op != OP_CONST:
                    sel_ptr[node.a] = sel_ptr[node_i]
                    nsel[node.a] = nsel[node_i]
                    phases[node.a] = 0
                    sp += 1
                    stack[sp] = node.a
                    continue
            if phases[node_i] == 1 and node.b >= 0 and p.nodes[node.b].op != OP_CONST:
                phases[node_i] = 2
                if p.nodes[node.a].guard != GUARD_NONE:
                    sel = sels + <Py_ssize_t>node.b * chunk
                    k = 0
                    lv = values_of(p, vals, node.a, chunk, &lstride)
                    g = p.nodes[node.a].guard
                    for t in range(nsel[node_i]):
                        # Written always, kept only if undecided: no branch on the value.
                        row = sel_ptr[node_i][t]
                        sel[k] = row
                        k += not decides(g, &lv[row * lstride])
                    sel_ptr[node.b] = sel
                    nsel[node.b] = k
                else:
                    sel_ptr[node.b] = sel_ptr[node_i]
                    nsel[node.b] = nsel[node_i]
                phases[node.b] = 0
                sp += 1
                stack[sp] = node.b
                continue
            # Compute this node for its rows.
            v = vals + <Py_ssize_t>node_i * chunk
            sel_of_node = <int32_t*>sel_ptr[node_i]
            if node.op == OP_PROP:
                col = &cols[node.arg]
                k = node.arg if p.cached[node.arg] else -1
                for t in range(nsel[node_i]):
                    row = sel_of_node[t]
                    read_cell(col, base + row, k, &v[row])
            elif p.fused[node_i]:
                # The property operand is read from its column as each row is computed.
                arg = p.nodes[node.a].arg
                col = &cols[arg]
                k = arg if p.cached[arg] else -1
                rv = values_of(p, vals, node.b, chunk, &rstride) if node.b >= 0 else NULL
                g = p.nodes[node.a].guard if node.b >= 0 else GUARD_NONE
                if node.op == OP_ISNULL:
                    # Only the validity bit matters: no branch per row.
                    for t in range(nsel[node_i]):
                        row = sel_of_node[t]
                        idx = base + row + col.first
                        v[row].tag = T_BOOL
                        v[row].slot = -1
                        v[row].i = cell_null(col, idx)
                    sp -= 1
                    continue
                if (node.op >= OP_EQ and node.op <= OP_LE and node.op != OP_ISNULL
                        and (rv.tag == T_INT or rv.tag == T_LONG or rv.tag == T_DOUBLE)):
                    # property <op> number literal: parse each value as the literal's type and
                    # compare (re-parsing is cheaper here than consulting the conversion cache).
                    for t in range(nsel[node_i]):
                        row = sel_of_node[t]
                        idx = base + row + col.first
                        if cell_null(col, idx):
                            set_null(&v[row])   # NULL = literal, NULL > literal, ...: all NULL
                            continue
                        if rv.tag == T_DOUBLE:
                            if not parse_double(col.data + col.offsets[idx],
                                                col.offsets[idx + 1] - col.offsets[idx], &xd):
                                failed[row] = 1
                                set_null(&v[row])
                                continue
                            c = dcmp(xd, rv.d)
                        else:
                            if not parse_integer(col.data + col.offsets[idx],
                                                 col.offsets[idx + 1] - col.offsets[idx],
                                                 p.digits, rv.tag == T_LONG, &x64):
                                failed[row] = 1
                                set_null(&v[row])
                                continue
                            c = icmp(x64, rv.i)
                        set_bool(&v[row], c == 0 if node.op == OP_EQ else (
                            c > 0 if node.op == OP_GT else c >= 0 if node.op == OP_GE else
                            c < 0 if node.op == OP_LT else c <= 0))
                    sp -= 1
                    continue
                if node.op >= OP_CONTAINS:
                    # CONTAINS family: NULL is FALSE, negated or not.
                    run_string_match(node.op, col, base, sel_of_node, nsel[node_i], v,
                                     p.consts[node.arg].s)
                    sp -= 1
                    continue
                for t in range(nsel[node_i]):
                    row = sel_of_node[t]
                    read_cell(col, base + row, k, &cell)
                    if g != GUARD_NONE and decides(g, &cell):
                        v[row] = cell
                    elif step(p, node, &v[row], &cell, rv, conv + <Py_ssize_t>row * p.n_slots) < 0:
                        failed[row] = 1
                        set_null(&v[row])
            elif node.op == OP_AND or node.op == OP_OR:
                # Operands are TRUE, FALSE or NULL; FALSE decides AND, TRUE decides OR.
                lv = values_of(p, vals, node.a, chunk, &lstride)
                rv = values_of(p, vals, node.b, chunk, &rstride)
                want = node.op == OP_OR
                for t in range(nsel[node_i]):
                    # Without branches on the values: decided (either side equals ``want``) gives
                    # want; else NULL if a side is NULL; else not want. Where the left side
                    # decided, the right side was not computed for the row and its stale value
                    # cannot change the result.
                    row = sel_of_node[t]
                    lv_row = &lv[row * lstride]
                    rv_row = &rv[row * rstride]
                    decided = (((lv_row.tag == T_BOOL) & ((lv_row.i != 0) == want))
                               | ((rv_row.tag == T_BOOL) & ((rv_row.i != 0) == want)))
                    v[row].slot = -1
                    v[row].tag = T_BOOL if decided | ((lv_row.tag != T_NULL) & (rv_row.tag != T_NULL)) \
                        else T_NULL
                    v[row].i = decided == want
            elif node.op != OP_CONST:   # constants are read in place, never copied per row
                lv = values_of(p, vals, node.a, chunk, &lstride)
                rv = values_of(p, vals, node.b, chunk, &rstride) if node.b >= 0 else NULL
                g = p.nodes[node.a].guard if node.b >= 0 else GUARD_NONE
                for t in range(nsel[node_i]):
                    row = sel_of_node[t]
                    if g != GUARD_NONE and decides(g, &lv[row * lstride]):
                        v[row] = lv[row * lstride]        # decided by the left operand
                    elif step(p, node, &v[row], &lv[row * lstride],
                              &rv[row * rstride] if rv != NULL else NULL,
                              conv + <Py_ssize_t>row * p.n_slots) < 0:
                        failed[row] = 1
                        set_null(&v[row])
            sp -= 1
        lv = values_of(p, vals, root, chunk, &lstride)
        for row in range(m):
            out[base + row] = R_ERROR if failed[row] else code_of(&lv[row * lstride])
        base += m
    return 0


# -- Python face ---------------------------------------------------------------------------------

cdef class Evaluator:
    """Evaluates one compiled Program; immutable after construction, so thread-safe."""

    def __cinit__(self, program):
        cdef Py_ssize_t i, k, size, n_args
        cdef StrView sv
        cdef uint64_t h
        nodes = program.rows()
        args = program.args
        n_args = len(args)
        self.program = program
        self._keep = []
        self._names = tuple(name for name in program.props)
        self._nodes = <Node*>malloc(max(1, len(nodes)) * sizeof(Node))
        self._consts = <Value*>calloc(max(1, n_args), sizeof(Value))
        self._sets = <StrSet*>calloc(max(1, n_args), sizeof(StrSet))
        self._cached = <uint8_t*>calloc(max(1, len(self._names)), 1)
        self._fused = <uint8_t*>calloc(max(1, len(nodes)), 1)
        self._n_args = n_args
        if (self._nodes == NULL or self._consts == NULL or self._sets == NULL or self._cached == NULL
                or self._fused == NULL):
            raise MemoryError()
        for i, (op, guard, a, b, parent, arg) in enumerate(nodes):
            self._nodes[i].op = op
            self._nodes[i].guard = guard
            self._nodes[i].a = a
            self._nodes[i].b = b
            self._nodes[i].parent = parent
            self._nodes[i].arg = arg
            if op == OP_PROP:
                self._cached[arg] += self._cached[arg] < 2
        for i in range(len(nodes)):
            a, b = self._nodes[i].a, self._nodes[i].b
            self._fused[i] = a >= 0 and self._nodes[a].op == OP_PROP and (
                b < 0 or self._nodes[b].op == OP_CONST)
        for i in range(len(self._names)):
            self._cached[i] = self._cached[i] > 1
            self.prog.any_cached |= self._cached[i]
        for i in range(n_args):
            value = args[i]
            self._sets[i].mask = -1
            self._consts[i].slot = -1
            if value is None:
                self._consts[i].tag = T_NULL
            elif value is True or value is False:
                self._consts[i].tag = T_BOOL
                self._consts[i].i = value
            elif isinstance(value, float):
                self._consts[i].tag = T_DOUBLE
                self._consts[i].d = value
            elif isinstance(value, int):
                self._consts[i].tag = T_LONG if type(value).__name__ == "Long" else T_INT
                self._consts[i].i = value
            elif isinstance(value, str):
                self._consts[i].tag = T_STR
                self._consts[i].s = self._bytes_view(value)
            else:  # an IN list
                size = 4
                while size < 2 * len(value):
                    size *= 2
                self._sets[i].mask = size - 1
                self._sets[i].n_small = -1
                if len(value) <= 8 and all(len(item.encode("utf-8", "surrogatepass")) <= 8 for item in value):
                    self._sets[i].n_small = len(value)
                    for k, item in enumerate(value):
                        sv = self._bytes_view(item)
                        self._sets[i].small_len[k] = <int32_t>sv.n
                        self._sets[i].small_word[k] = window_of(sv.s, sv.n)
                self._sets[i].buckets = <StrView*>calloc(size, sizeof(StrView))
                self._sets[i].hashes = <uint64_t*>calloc(size, sizeof(uint64_t))
                if self._sets[i].buckets == NULL or self._sets[i].hashes == NULL:
                    raise MemoryError()
                for item in value:
                    sv = self._bytes_view(item)
                    h = fnv1a(sv.s, sv.n)
                    k = <Py_ssize_t>(h & <uint64_t>(size - 1))
                    while self._sets[i].buckets[k].s != NULL:
                        k = (k + 1) & (size - 1)
                    self._sets[i].buckets[k] = sv
                    self._sets[i].hashes[k] = h
        self.prog.nodes = self._nodes
        self.prog.n_nodes = len(nodes)
        self.prog.n_slots = len(self._names)
        self.prog.consts = self._consts
        self.prog.sets = self._sets
        self.prog.digits = <const uint8_t*>PyBytes_AS_STRING(DIGITS)
        self.prog.cached = self._cached
        self.prog.fused = self._fused

    cdef StrView _bytes_view(self, str value) except *:
        cdef StrView out
        b = value.encode("utf-8", "surrogatepass")
        self._keep.append(b)
        out.s = PyBytes_AS_STRING(b)
        out.n = PyBytes_GET_SIZE(b)
        if out.n == 0:
            out.s = EMPTY
        return out

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._sets != NULL:
            for i in range(self._n_args):
                free(self._sets[i].buckets)
                free(self._sets[i].hashes)
            free(self._sets)
        free(self._nodes)
        free(self._consts)
        free(self._cached)
        free(self._fused)

    cdef object _load(self, object props, StrView* slots):
        """Fill one StrView per property slot from a mapping (None: every property absent).

        Returns None, or a list of objects the views point into that the
        caller must keep alive while it evaluates.
        """
        cdef Py_ssize_t k
        cdef PyObject* item
        cdef object value
        cdef list keep = None
        cdef bint is_dict = type(props) is dict
        if props is None:
            for k in range(self.prog.n_slots):
                slots[k].s = NULL
            return None
        if not is_dict and not isinstance(props, Mapping):
            raise TypeError(f"message properties must be a mapping of str to str, got {type(props).__name__}")
        for k in range(self.prog.n_slots):
            name = self._names[k]
            if is_dict:
                item = PyDict_GetItemWithError(props, name)
                if item == NULL:
                    slots[k].s = NULL
                    continue
                value = <object>item
            else:
                value = props.get(name)
                if keep is None:
                    keep = []
                keep.append(value)
            if value is None:
                slots[k].s = NULL
            elif isinstance(value, str):
                try:
                    slots[k].s = PyUnicode_AsUTF8AndSize(value, &slots[k].n)
                except UnicodeEncodeError:
                    # Lone surrogates: encode them as they are, like Java's UTF-16 would hold them.
                    b = (<str>value).encode("utf-8", "surrogatepass")
                    if keep is None:
                        keep = []
                    keep.append(b)
                    slots[k].s = PyBytes_AS_STRING(b)
                    slots[k].n = PyBytes_GET_SIZE(b)
                if slots[k].n == 0:
                    slots[k].s = EMPTY
            else:
                raise TypeError(f"property {name!r} must be a str, got {type(value).__name__}")
        return keep

    cdef int _code(self, object props) except -1:
        """Result code for one message (R_ERROR where the broker throws)."""
        cdef StrView small_slots[SMALL]
        cdef Conv small_conv[SMALL]
        cdef Value small_vals[SMALL]
        cdef int32_t k, n_slots = self.prog.n_slots, n_nodes = self.prog.n_nodes
        cdef StrView* slots = small_slots
        cdef Conv* conv = small_conv
        cdef Value* vals = small_vals
        cdef int code
        if n_slots > SMALL:
            slots = <StrView*>malloc(n_slots * sizeof(StrView))
            conv = <Conv*>malloc(n_slots * sizeof(Conv))
        if n_nodes > SMALL:
            vals = <Value*>malloc(n_nodes * sizeof(Value))
        try:
            if slots == NULL or conv == NULL or vals == NULL:
                raise MemoryError()
            keep = self._load(props, slots)   # holds any temporary the views point into
            for k in range(n_slots):
                conv[k].i32_state = conv[k].i64_state = conv[k].f64_state = 0
            code = run(&self.prog, slots, conv, vals)
        finally:
            if slots != small_slots:
                free(slots)
                free(conv)
            if vals != small_vals:
                free(vals)
        return code

    def evaluate(self, props):
        """Result code for one message; raises SelectorEvaluationError where the broker throws."""
        cdef int code = self._code(props)
        if code == R_ERROR:
            self._raise(props)
        return code

    def evaluate_value(self, props):
        """True, False or None (SQL NULL) for one message; raises where the broker throws."""
        cdef int code = self._code(props)
        if code == R_TRUE:
            return True
        if code == R_FALSE:
            return False
        if code == R_UNKNOWN:
            return None
        self._raise(props)

    def matches(self, props):
        """The broker's decision for one message (NULL and errors: False)."""
        return self._code(props) == R_TRUE

    def _raise(self, props):
        """Raise the error the broker throws for this message (after ``_code`` gave R_ERROR).

        Errors are rare: the message is evaluated again, traced, and the node that threw
        and its operands are worded by :func:`selector.errors.comparison_error`, the
        wording the twin uses too.
        """
        cdef int32_t k, failed = -1, n_slots = self.prog.n_slots
        cdef StrView* slots = <StrView*>malloc(max(1, n_slots) * sizeof(StrView))
        cdef Conv* conv = <Conv*>malloc(max(1, n_slots) * sizeof(Conv))
        cdef Value* vals = <Value*>malloc(max(1, self.prog.n_nodes) * sizeof(Value))
        cdef const Node* node
        try:
            if slots == NULL or conv == NULL or vals == NULL:
                raise MemoryError()
            keep = self._load(props, slots)
            for k in range(n_slots):
                conv[k].i32_state = conv[k].i64_state = conv[k].f64_state = 0
            if run_traced(&self.prog, slots, conv, vals, &failed) != R_ERROR:
                raise AssertionError("the evaluation threw once and not again")
            node = &self.prog.nodes[failed]
            lv = self._operand(node.a, &vals[node.a])
            rv = self._operand(node.b, &vals[node.b])
        finally:
            free(slots)
            free(conv)
            free(vals)
        raise comparison_error(COMPARISON_SYMBOLS[node.op], lv, rv)

    cdef object _operand(self, int32_t index, const Value* v):
        """A node's value as the twin holds it: the program's own constant or a Python value."""
        if self.prog.nodes[index].op == OP_CONST:
            return self.program.args[self.prog.nodes[index].arg]
        if v.tag == T_NULL:
            return None
        if v.tag == T_BOOL:
            return bool(v.i)
        if v.tag == T_INT:
            return int(v.i)
        if v.tag == T_LONG:
            return Long(v.i)
        if v.tag == T_DOUBLE:
            return v.d
        return v.s.s[:v.s.n].decode("utf-8", "surrogatepass")

    def evaluate_many(self, rows):
        """Result codes (int8) for a sequence of mappings, in one call; errors give R_ERROR."""
        cdef Py_ssize_t i, k, n = len(rows)
        cdef int32_t n_slots = self.prog.n_slots
        out = np.empty(n, dtype=np.int8)
        cdef int8_t[::1] res = out
        cdef StrView* slots = <StrView*>malloc(max(1, n_slots) * sizeof(StrView))
        cdef Conv* conv = <Conv*>malloc(max(1, n_slots) * sizeof(Conv))
        cdef Value* vals = <Value*>malloc(max(1, self.prog.n_nodes) * sizeof(Value))
        try:
            if slots == NULL or conv == NULL or vals == NULL:
                raise MemoryError()
            for i in range(n):
                keep = self._load(rows[i], slots)
                for k in range(n_slots):
                    conv[k].i32_state = conv[k].i64_state = conv[k].f64_state = 0
                res[i] = run(&self.prog, slots, conv, vals)
        finally:
            free(slots)
            free(conv)
            free(vals)
        return out

    def evaluate_columns(self, columns, Py_ssize_t length):
        """Result codes (int8) for ``length`` rows of Arrow string arrays, one per property slot.

        ``columns[k]`` is a pyarrow StringArray (int32 offsets) holding property
        ``k`` (null = absent), or None if no row has it. Evaluates a chunk of
        rows at a time, node by node, without the GIL.
        """
        cdef int32_t n_slots = self.prog.n_slots, n = self.prog.n_nodes
        cdef Py_ssize_t k
        cdef Scratch w
        if len(columns) != n_slots:
            raise ValueError(f"expected {n_slots} columns, got {len(columns)}")
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        out = np.empty(length, dtype=np.int8)
        cdef int8_t[::1] res = out
        cdef Column* cols = <Column*>calloc(max(1, n_slots), sizeof(Column))
        w.chunk = max(1, min(<Py_ssize_t>CHUNK, <Py_ssize_t>SCRATCH_VALUES // max(1, n)))
        # calloc: the AND/OR loop reads (and ignores) right-operand slots never computed.
        w.vals = <Value*>calloc(<size_t>n * w.chunk, sizeof(Value))
        w.sels = <int32_t*>malloc(<size_t>(n + 1) * w.chunk * sizeof(int32_t))
        w.sel_ptr = <const int32_t**>malloc(<size_t>n * sizeof(void*))
        w.nsel = <int32_t*>malloc(<size_t>n * sizeof(int32_t))
        w.stack = <int32_t*>malloc(<size_t>n * sizeof(int32_t))
        w.phases = <uint8_t*>malloc(<size_t>n)
        w.conv = <Conv*>malloc(<size_t>w.chunk * max(1, n_slots) * sizeof(Conv))
        w.failed = <uint8_t*>malloc(w.chunk)
        try:
            if (cols == NULL or w.vals == NULL or w.sels == NULL or w.sel_ptr == NULL or w.nsel == NULL
                    or w.stack == NULL or w.phases == NULL or w.conv == NULL or w.failed == NULL):
                raise MemoryError()
            for k in range(w.chunk):
                w.sels[<Py_ssize_t>n * w.chunk + k] = <int32_t>k
            keep = []
            for k in range(n_slots):
                col = columns[k]
                if col is None:
                    continue
                if len(col) != length:
                    raise ValueError(f"column {k} has {len(col)} rows, expected {length}")
                bufs = col.buffers()
                keep.append(bufs)
                if bufs[0] is not None and col.null_count:
                    cols[k].valid = <const uint8_t*><uintptr_t>bufs[0].address
                cols[k].offsets = <const int32_t*><uintptr_t>bufs[1].address
                if bufs[2] is not None and bufs[2].size:
                    cols[k].data = <const char*><uintptr_t>bufs[2].address
                else:
                    cols[k].data = EMPTY
                cols[k].first = col.offset
            with nogil:
                run_columns(&self.prog, cols, length, &res[0] if length else NULL, &w)
        finally:
            free(cols)
            free(w.vals)
            free(w.sels)
            free(w.sel_ptr)
            free(w.nsel)
            free(w.stack)
            free(w.phases)
            free(w.conv)
            free(w.failed)
        return out
