# The Cython selector engine's contract: a compiled selector is a flat array of
# typed nodes in post-order (children before parents, children by index), walked
# by one forward loop without recursion (see selector/opcodes.py for the layout
# and _eval_py.py for the same loop in plain Python).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef enum:
    # Opcodes; the numbers are those of selector/opcodes.py.
    OP_PROP = 1
    OP_CONST = 2
    OP_BOOLCAST = 3
    OP_NOT = 4
    OP_NEG = 5
    OP_AND = 6
    OP_OR = 7
    OP_EQ = 8
    OP_ISNULL = 9
    OP_GT = 10
    OP_GE = 11
    OP_LT = 12
    OP_LE = 13
    OP_IN = 14
    OP_NOT_IN = 15
    OP_CONTAINS = 16
    OP_STARTSWITH = 17
    OP_ENDSWITH = 18
    OP_NOT_CONTAINS = 19
    OP_NOT_STARTSWITH = 20
    OP_NOT_ENDSWITH = 21

cdef enum:
    GUARD_NONE = 0      # no short circuit
    GUARD_FALSE = 1     # value FALSE decides the parent (left operand of AND)
    GUARD_TRUE = 2      # value TRUE decides the parent (left operand of OR)
    GUARD_NULL = 3      # value NULL decides the parent (left operand of > >= < <=)

cdef enum:
    # Java classes of run-time values.
    T_NULL = 0
    T_BOOL = 1
    T_INT = 2           # java.lang.Integer
    T_LONG = 3          # java.lang.Long
    T_DOUBLE = 4        # java.lang.Double
    T_STR = 5           # java.lang.String (UTF-8 bytes here)

cdef enum:
    # Result codes, as in selector/__init__.py.
    R_FALSE = 0
    R_TRUE = 1
    R_UNKNOWN = 2       # SQL NULL
    R_ERROR = 3         # the broker's evaluation throws

ctypedef struct Node:
    uint8_t op          # opcode (OP_*)
    uint8_t guard       # GUARD_* tested on this node's value
    int32_t a           # first child's index, -1 if none
    int32_t b           # second child's index, -1 if none
    int32_t parent      # parent's index, -1 for the root (the last node)
    int32_t arg         # OP_PROP: property slot; OP_CONST/IN/CONTAINS...: argument index; else -1

ctypedef struct StrView:
    const char* s       # UTF-8 bytes, not NUL-terminated; NULL means "absent" (Java null)
    Py_ssize_t n        # length in bytes

ctypedef struct Value:
    uint8_t tag         # T_*
    int32_t slot        # property slot a T_STR value was read from (conversion cache), else -1
    int64_t i           # T_BOOL (0 or 1), T_INT, T_LONG
    double d            # T_DOUBLE
    StrView s           # T_STR

ctypedef struct Conv:
    # Per property slot and row: each conversion of its value is done at most once.
    uint8_t i32_state   # 0 not tried, 1 parsed, 2 not in Integer.parseInt's grammar
    uint8_t i64_state   # the same for Long.parseLong
    uint8_t f64_state   # the same for Double.valueOf
    int32_t i32
    int64_t i64
    double f64

ctypedef struct StrSet:
    # Open-addressing hash set of an IN list (FNV-1a over UTF-8 bytes).
    Py_ssize_t mask     # bucket count - 1 (a power of two minus one); -1 if this arg is no set
    StrView* buckets    # s == NULL marks an empty bucket
    uint64_t* hashes
    # Small lists (<= SMALL_SET items of <= 8 bytes each) are also kept as
    # (length, first-bytes word) pairs, tested without hashing or branches.
    int32_t n_small     # item count, or -1 when the list is not small
    int32_t small_len[8]
    uint64_t small_word[8]

ctypedef struct CProgram:
    const Node* nodes
    int32_t n_nodes
    int32_t n_slots     # number of distinct properties read
    const Value* consts # per argument index: constants, and CONTAINS-family patterns as T_STR
    const StrSet* sets  # per argument index: IN sets
    const uint8_t* digits  # BMP code point -> Unicode decimal digit value, 255 if not Nd
    const uint8_t* cached  # per slot: read by more than one node, so its conversions are cached
    bint any_cached        # some slot is cached
    const uint8_t* fused   # per node: its first child is a property read straight from the
                           # column by run_columns (second child absent or a constant)

cdef int run(const CProgram* prog, const StrView* slots, Conv* conv, Value* vals) noexcept nogil

cdef class Evaluator:
    cdef CProgram prog
    cdef Node* _nodes
    cdef Value* _consts
    cdef StrSet* _sets
    cdef Py_ssize_t _n_args         # length of _consts and _sets
    cdef uint8_t* _cached
    cdef uint8_t* _fused
    cdef readonly object program    # the selector.compiler.Program it was built from
    cdef list _keep                 # bytes objects the C tables point into
    cdef tuple _names               # interned property name per slot

    cdef StrView _bytes_view(self, str value) except *
    cdef object _load(self, object props, StrView* slots)
    cdef int _code(self, object props) except -1
    cdef object _operand(self, int32_t index, const Value* v)
