"""The compiled selector's contract: opcodes, guards and the flat node layout.

A module of constants only, so that everything built on the contract imports it
without a cycle: the compiler (:mod:`selector.compiler`), its flattening pass
(``_flatten.pyx`` / ``_flatten_py.py``) and both evaluators (``_eval.pyx``, whose
``_eval.pxd`` declares the same numbers, and ``_eval_py.py``).
"""
from __future__ import annotations

import numpy as np

# Opcodes (the same numbers are declared in _eval.pxd; tests/selector/test_selector_batch.py checks).
OP_PROP = 1          # arg: property slot
OP_CONST = 2         # arg: index into Program.args
OP_BOOLCAST = 3      # a
OP_NOT = 4           # a
OP_NEG = 5           # a
OP_AND = 6           # a, b
OP_OR = 7            # a, b
OP_EQ = 8            # a, b
OP_ISNULL = 9        # a
OP_GT = 10           # a, b
OP_GE = 11
OP_LT = 12
OP_LE = 13
OP_IN = 14           # a; arg: index of a frozenset of str in Program.args
OP_NOT_IN = 15
OP_CONTAINS = 16     # a; arg: index of a non-empty str in Program.args
OP_STARTSWITH = 17
OP_ENDSWITH = 18
OP_NOT_CONTAINS = 19
OP_NOT_STARTSWITH = 20
OP_NOT_ENDSWITH = 21

GUARD_NONE = 0
GUARD_FALSE = 1      # value FALSE -> parent is FALSE
GUARD_TRUE = 2       # value TRUE  -> parent is TRUE
GUARD_NULL = 3       # value NULL  -> parent is NULL

OPCODE_NAMES = {v: k[3:] for k, v in dict(globals()).items() if k.startswith("OP_")}

NODE_DTYPE = np.dtype([
    ("op", np.uint8),       # opcode
    ("guard", np.uint8),    # GUARD_* applied to this node's value
    ("a", np.int32),        # first child (node index) or -1
    ("b", np.int32),        # second child (node index) or -1
    ("parent", np.int32),   # parent node index, -1 for the root
    ("arg", np.int32),      # property slot or index into args, -1 if unused
])

# BETWEEN duplicates its operand, so pathological nesting could blow up.
MAX_NODES = 1 << 22

ORDERING = {">": OP_GT, ">=": OP_GE, "<": OP_LT, "<=": OP_LE}
MATCH = {"CONTAINS": OP_CONTAINS, "STARTSWITH": OP_STARTSWITH, "ENDSWITH": OP_ENDSWITH}
#: The guard each operator puts on its first operand.
GUARDS = {OP_AND: GUARD_FALSE, OP_OR: GUARD_TRUE, OP_GT: GUARD_NULL, OP_GE: GUARD_NULL,
          OP_LT: GUARD_NULL, OP_LE: GUARD_NULL}
#: How an error message spells the comparison a node makes (both engines word errors with it).
COMPARISON_SYMBOLS = {OP_EQ: "=", OP_GT: ">", OP_GE: ">=", OP_LT: "<", OP_LE: "<="}
