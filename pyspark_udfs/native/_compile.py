"""Selector AST → native Spark expression (IR), with the broker's exact semantics.

Every sub-expression of a selector has a type the parser already fixes:

* **S** — a String: a property (NULL when absent) or a string literal;
* **N** — a number: always a compile-time constant (a literal, or a negated
  literal, folded here with Java's int32/int64 wrap-around);
* **B** — a Boolean node (comparison, AND/OR/NOT, IN, CONTAINS..., IS NULL,
  boolean-cast, TRUE/FALSE/NULL) or a negation of one or of a String, whose
  value is always NULL (docs/selector-semantics.md#evaluation).

A B node's result is one of five *codes*: FALSE 0, NULL 1, TRUE 2, and the
two exceptions the broker's evaluation can throw, RuntimeException 3 and
ClassCastException 4. A B node that cannot throw is kept as a plain nullable
Spark boolean (Spark's AND/OR/NOT are the same three-valued logic as the
broker's); one that can throw carries an int code column, and AND/OR/NOT and
``=`` combine codes by table lookup (``get(array(...), x * 5 + y)``), so each
operand appears once in the expression and a selector's Spark expression grows
linearly with its text. The tables encode the broker's left-to-right
short-circuit: an exception on the right of ``FALSE AND ...`` never surfaces.

For ``selector_column`` only "is it TRUE" matters, so B nodes also offer a
``truth`` expression that is cheaper than the code where the semantics allow:
``x AND y`` is TRUE iff both are, ``x OR y`` (x unable to throw) iff either is,
and a comparison against a number is TRUE iff the Java-parsed value compares.
"""
from __future__ import annotations

from dataclasses import dataclass

import rmqfilter_java as java
from selector import nodes as n

from . import _ir as ir
from . import _java as jv

__all__ = [
    "CC_ERROR",
    "ERROR_NAMES",
    "FALSE",
    "MAX_DEPTH",
    "MAX_TREE_SIZE",
    "NULL",
    "RT_ERROR",
    "TRUE",
    "NotTranslatable",
    "Translation",
    "translate_tree",
]

FALSE, NULL, TRUE, RT_ERROR, CC_ERROR = 0, 1, 2, 3, 4
ERROR_NAMES = {RT_ERROR: "RuntimeException", CC_ERROR: "ClassCastException"}

#: Above these the native expression would strain Catalyst (deep recursion in the
#: JVM, huge generated methods); the selector then runs in the Arrow UDF instead.
MAX_TREE_SIZE = 20_000
MAX_DEPTH = 400


class NotTranslatable(Exception):
    """A construct the native translation does not express exactly; ``construct`` names it."""

    def __init__(self, construct: str):
        super().__init__(construct)
        self.construct = construct


# -- code tables -----------------------------------------------------------------------------

def _is_err(c: int) -> bool:
    return c >= RT_ERROR


def _and(x: int, y: int) -> int:
    if _is_err(x) or x == FALSE:
        return x
    if _is_err(y) or y == FALSE:
        return y
    return NULL if NULL in (x, y) else TRUE


def _or(x: int, y: int) -> int:
    if _is_err(x) or x == TRUE:
        return x
    if _is_err(y) or y == TRUE:
        return y
    return NULL if NULL in (x, y) else FALSE


def _not(x: int) -> int:
    return (TRUE, NULL, FALSE, RT_ERROR, CC_ERROR)[x]


def _eq_bb(x: int, y: int) -> int:
    """``x = y`` for two Boolean nodes (either may be NULL or have thrown)."""
    if _is_err(x):
        return x
    if _is_err(y):
        return y
    if x == NULL:
        return TRUE if y == NULL else NULL
    if y == NULL:
        return FALSE
    return TRUE if x == y else FALSE


def _eq_bs(x: int, s_present: int) -> int:
    """``x = s``, Boolean on the left of a String: ClassCastException when both are non-null."""
    if _is_err(x):
        return x
    if x == NULL:
        return TRUE if not s_present else NULL
    return CC_ERROR if s_present else FALSE


def _eq_sb(s_state: int, y: int) -> int:
    """``s = y``, String on the left (0 NULL, 1 parses FALSE, 2 parses TRUE) of a Boolean."""
    if _is_err(y):
        return y
    if s_state == 0:
        return TRUE if y == NULL else NULL
    if y == NULL:
        return FALSE
    return TRUE if (s_state == 2) == (y == TRUE) else FALSE


def _eq_bn(x: int) -> int:
    """``x = number``: a Boolean never equals a number (compareTo is -1)."""
    return x if _is_err(x) or x == NULL else FALSE


def _eq_nb(y: int) -> int:
    """``number = y``: NULL on the right gives FALSE, as any non-null left does."""
    return y if _is_err(y) else FALSE


def _null_of(x: int) -> int:
    """The broker's unary minus of a Boolean: NULL, but an exception inside still surfaces."""
    return x if _is_err(x) else NULL


CODES = range(5)
AND_TABLE = tuple(_and(x, y) for x in CODES for y in CODES)
OR_TABLE = tuple(_or(x, y) for x in CODES for y in CODES)
NOT_TABLE = tuple(_not(x) for x in CODES)
EQ_BB_TABLE = tuple(_eq_bb(x, y) for x in CODES for y in CODES)
EQ_BS_TABLE = tuple(_eq_bs(x, s) for x in CODES for s in (0, 1))
EQ_SB_TABLE = tuple(_eq_sb(s, y) for s in (0, 1, 2) for y in CODES)
EQ_BN_TABLE = tuple(_eq_bn(x) for x in CODES)
EQ_NB_TABLE = tuple(_eq_nb(y) for y in CODES)
NULL_OF_TABLE = tuple(_null_of(x) for x in CODES)
IS_NULL_TABLE = (FALSE, TRUE, FALSE, RT_ERROR, CC_ERROR)
IS_NOT_NULL_TABLE = (TRUE, FALSE, TRUE, RT_ERROR, CC_ERROR)
NOT_A_STRING_TABLE = (FALSE, FALSE, FALSE, RT_ERROR, CC_ERROR)  # CONTAINS family on a non-String


def _table(values: tuple, index: ir.Node) -> ir.Node:
    return ir.op("table", values, "int", index)


def _index(x: ir.Node, width: int, y: ir.Node) -> ir.Node:
    return ir.op("add", ir.op("mul", x, ir.lit(width, "int")), y)


# -- typed terms -----------------------------------------------------------------------------

class S:
    """A String value: ``const`` (a str) for a literal, else ``col`` (NULL when absent)."""

    __slots__ = ("col", "const")

    def __init__(self, col: ir.Node, const: str | None = None):
        self.col = col
        self.const = const


class N:
    """A numeric constant, in :mod:`selector.javalang`'s representation (int, Long, float)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    @property
    def spark_type(self) -> str:
        return {"I": "int", "L": "bigint", "D": "double"}[java.java_type(self.value)]

    def col(self) -> ir.Node:
        return ir.lit(self.value, self.spark_type)


class B:
    """A Boolean node: a constant code, a plain boolean (cannot throw) or a code column.

    ``null_only`` marks the broker's negation of a non-number, whose value is
    always NULL (only an exception inside it can surface).
    """

    __slots__ = ("_code", "_truth", "const", "null_only", "val")

    def __init__(self, *, const: int | None = None, val: ir.Node | None = None,
                 code: ir.Node | None = None, truth: ir.Node | None = None, null_only: bool = False):
        self.const = const
        self.val = val
        self._code = code
        self._truth = truth
        self.null_only = null_only

    @property
    def can_throw(self) -> bool:
        return self._code is not None or (self.const is not None and _is_err(self.const))

    @property
    def plain(self) -> bool:
        return self.val is not None

    def code(self) -> ir.Node:
        if self.const is not None:
            return ir.lit(self.const, "int")
        if self._code is not None:
            return self._code
        # TRUE -> 2, FALSE -> 0, NULL -> 1, referencing the value once.
        return ir.op("coalesce", ir.op("mul", ir.op("cast", self.val, "int"), ir.lit(2, "int")),
                     ir.lit(NULL, "int"))

    def truth(self) -> ir.Node:
        """TRUE where the result is TRUE; FALSE or NULL elsewhere."""
        if self.const is not None:
            return ir.lit(self.const == TRUE)
        if self.val is not None:
            return self.val
        if self._truth is not None:
            return self._truth
        return ir.op("eq", self._code, ir.lit(TRUE, "int"))


def _const(c: int, null_only: bool = False) -> B:
    return B(const=c, null_only=null_only)


def _coded(values: tuple, index: ir.Node, truth: ir.Node | None = None, null_only: bool = False) -> B:
    return B(code=_table(values, index), truth=truth, null_only=null_only)


def _lookup1(values: tuple, x: B, **kw) -> B:
    if x.const is not None:
        return _const(values[x.const], kw.get("null_only", False))
    return _coded(values, x.code(), **kw)


def _lookup2(values: tuple, width: int, x_index: ir.Node | int, y_index: ir.Node | int, **kw) -> B:
    if isinstance(x_index, int) and isinstance(y_index, int):
        return _const(values[x_index * width + y_index], kw.get("null_only", False))
    xi = ir.lit(x_index, "int") if isinstance(x_index, int) else x_index
    yi = ir.lit(y_index, "int") if isinstance(y_index, int) else y_index
    return _coded(values, _index(xi, width, yi), **kw)


def _b_index(x: B) -> ir.Node | int:
    return x.const if x.const is not None else x.code()


# -- logic -----------------------------------------------------------------------------------

def logic_and(x: B, y: B) -> B:
    if x.const is not None and (x.const == FALSE or _is_err(x.const)):
        return x  # y is never evaluated
    if x.const == TRUE:
        return y
    if x.plain and y.plain:
        return B(val=ir.op("and", x.val, y.val))
    if x.plain and y.const is not None and not _is_err(y.const):
        return B(val=ir.op("and", x.val, ir.lit(None if y.const == NULL else y.const == TRUE, "boolean")))
    return _lookup2(AND_TABLE, 5, _b_index(x), _b_index(y), truth=ir.op("and", x.truth(), y.truth()))


def logic_or(x: B, y: B) -> B:
    if x.const is not None and (x.const == TRUE or _is_err(x.const)):
        return x
    if x.const == FALSE:
        return y
    if x.plain and y.plain:
        return B(val=ir.op("or", x.val, y.val))
    if x.plain and y.const is not None and not _is_err(y.const):
        return B(val=ir.op("or", x.val, ir.lit(None if y.const == NULL else y.const == TRUE, "boolean")))
    # x TRUE, or x not TRUE and y TRUE: only an exception in x stands in the way.
    truth = ir.op("or", x.truth(), y.truth()) if not x.can_throw else None
    return _lookup2(OR_TABLE, 5, _b_index(x), _b_index(y), truth=truth)


def logic_not(x: B) -> B:
    if x.plain:
        return B(val=ir.op("not", x.val))
    if x.const is not None:
        return _const(_not(x.const), x.null_only)
    return _coded(NOT_TABLE, x.code(), truth=ir.op("eq", x.code(), ir.lit(FALSE, "int")),
                  null_only=x.null_only)


# -- constant folding with the broker's rules (selector.javalang) ----------------------------

def _fold_eq(lv, rv) -> int:
    if lv is None and rv is None:
        return TRUE
    if lv is None:
        return NULL
    if rv is None:
        return FALSE
    if java.equals(lv, rv):
        return TRUE
    try:
        return TRUE if java.compare(lv, rv) == 0 else FALSE
    except java.JavaNumberFormatError:
        return RT_ERROR
    except java.JavaClassCastError:
        return CC_ERROR


_ORDER = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


def _fold_order(symbol: str, lv, rv) -> int:
    if lv is None or rv is None:
        return NULL
    try:
        if isinstance(lv, str) and isinstance(rv, str):
            c = java.double_compare(java.parse_double(lv), java.parse_double(rv))
        else:
            c = java.compare(lv, rv)
    except java.JavaNumberFormatError:
        return RT_ERROR
    except java.JavaClassCastError:
        return CC_ERROR
    return TRUE if _ORDER[symbol](c) else FALSE


# -- comparisons -----------------------------------------------------------------------------

_SPARK_CMP = {"=": "eq", "<>": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}


def _parser_for(number: N):
    return {"int": jv.parse_int32, "bigint": jv.parse_int64, "double": jv.parse_double}[number.spark_type]


def _number_compare(symbol: str, v: ir.Node, number: N) -> ir.Node:
    """``v <symbol> number`` for a Java-parsed value v (NULL propagates)."""
    if number.spark_type == "double" and number.value == 0.0:
        # Unreachable through the parser (0.0 literals are rejected), kept exact anyway.
        return jv.double_compare_op(symbol, v, number.col())
    return ir.op(_SPARK_CMP[symbol], v, number.col())


def _string_vs_number(symbol: str, s: S, number: N, string_left: bool) -> B:
    """A String compared with a number: the String is parsed with the number's Java parser."""
    v = _parser_for(number)(s.col)
    core = _number_compare(symbol if string_left else _MIRROR[symbol], v, number)
    s_null = ir.op("isnull", s.col)
    if symbol in ("=", "<>"):
        # NULL string on the left: NULL; on the right: "=" FALSE, "<>" TRUE.
        on_null = NULL if string_left else (FALSE if symbol == "=" else TRUE)
    else:
        on_null = NULL
    code = ir.op("case", [(s_null, ir.lit(on_null, "int")),
                          (ir.op("isnull", v), ir.lit(RT_ERROR, "int")),
                          (core, ir.lit(TRUE, "int"))], ir.lit(FALSE, "int"))
    if number.spark_type == "double":
        core_truth = core
    else:
        op_symbol = symbol if string_left else _MIRROR[symbol]
        core_truth = jv.integer_compare_truth(s.col, number.spark_type,
                                              lambda value: _number_compare(op_symbol, value, number))
    truth = core_truth if on_null != TRUE else ir.op("or", s_null, core_truth)
    return B(code=code, truth=truth)


def _string_equality(x: S, y: S) -> B:
    if x.const is not None:      # x non-null: NULL y gives FALSE
        return B(val=ir.op("coalesce", ir.op("eq", x.col, y.col), ir.lit(False)))
    if y.const is not None:      # NULL x gives NULL
        return B(val=ir.op("eq", x.col, y.col))
    x_null, y_null = ir.op("isnull", x.col), ir.op("isnull", y.col)
    return B(val=ir.op("case", [(x_null, ir.op("case", [(y_null, ir.lit(True))], ir.lit(None, "boolean"))),
                                (y_null, ir.lit(False))], ir.op("eq", x.col, y.col)))


def _string_state(s: S) -> ir.Node | int:
    """0 NULL, 1 parses as FALSE, 2 parses as TRUE (``Boolean.parseBoolean``)."""
    if s.const is not None:
        return 2 if java.parse_boolean(s.const) else 1
    return ir.op("case", [(ir.op("isnull", s.col), ir.lit(0, "int")),
                          (jv.parse_boolean(s.col), ir.lit(2, "int"))], ir.lit(1, "int"))


def _string_present(s: S) -> ir.Node | int:
    if s.const is not None:
        return 1
    return ir.op("case", [(ir.op("isnull", s.col), ir.lit(0, "int"))], ir.lit(1, "int"))


def equality(x, y) -> B:
    """``x = y``: both sides evaluated, the asymmetric NULL rules, then the coercions.

    See docs/selector-semantics.md#evaluation and docs/selector-semantics.md#comparison-and-coercion.
    """
    if isinstance(x, (S, N)) and isinstance(y, (S, N)):
        xc = x.value if isinstance(x, N) else x.const
        yc = y.value if isinstance(y, N) else y.const
        x_const = isinstance(x, N) or x.const is not None
        y_const = isinstance(y, N) or y.const is not None
        if x_const and y_const:
            return _const(_fold_eq(xc, yc))
        if isinstance(x, S) and isinstance(y, S):
            return _string_equality(x, y)
        if isinstance(x, S):
            if x.const is not None:
                return _const(_fold_eq(x.const, y.value))
            return _string_vs_number("=", x, y, string_left=True)
        if y.const is not None:
            return _const(_fold_eq(x.value, y.const))
        return _string_vs_number("=", y, x, string_left=False)
    if isinstance(x, B) and isinstance(y, B):
        return _lookup2(EQ_BB_TABLE, 5, _b_index(x), _b_index(y))
    if isinstance(x, B) and isinstance(y, S):
        return _lookup2(EQ_BS_TABLE, 2, _b_index(x), _string_present(y))
    if isinstance(x, S) and isinstance(y, B):
        return _lookup2(EQ_SB_TABLE, 5, _string_state(x), _b_index(y))
    if isinstance(x, B):  # y is a number
        return _lookup1(EQ_BN_TABLE, x)
    return _lookup1(EQ_NB_TABLE, y)  # number = Boolean


def ordering(symbol: str, x, y) -> B:
    """``x > y`` etc.: NULL left stops evaluation; two Strings compare as Java doubles."""
    if isinstance(x, B):
        if not x.null_only:
            raise NotTranslatable(f"ordering comparison of a boolean expression ({symbol})")
        return _lookup1(NULL_OF_TABLE, x, null_only=True)
    if isinstance(y, B):
        if not y.null_only:
            raise NotTranslatable(f"ordering comparison of a boolean expression ({symbol})")
        if isinstance(x, N) or (isinstance(x, S) and x.const is not None):
            return _lookup1(NULL_OF_TABLE, y, null_only=True)
        if y.const is not None:
            code = _null_of(y.const)
            return B(code=ir.op("case", [(ir.op("isnull", x.col), ir.lit(NULL, "int"))], ir.lit(code, "int")),
                     truth=ir.lit(False), null_only=True)
        return B(code=ir.op("case", [(ir.op("isnull", x.col), ir.lit(NULL, "int"))],
                            _table(NULL_OF_TABLE, y.code())), truth=ir.lit(False), null_only=True)
    x_const = isinstance(x, N) or x.const is not None
    y_const = isinstance(y, N) or y.const is not None
    if x_const and y_const:
        xc = x.value if isinstance(x, N) else x.const
        yc = y.value if isinstance(y, N) else y.const
        return _const(_fold_order(symbol, xc, yc))
    if isinstance(x, S) and isinstance(y, S):
        if x.const is not None or y.const is not None:
            raise NotTranslatable("ordering comparison with a string literal")
        p, q = jv.parse_double(x.col), jv.parse_double(y.col)
        core = jv.double_compare_op(symbol, p, q)
        code = ir.op("case", [(ir.op("isnull", x.col), ir.lit(NULL, "int")),
                              (ir.op("isnull", y.col), ir.lit(NULL, "int")),
                              (ir.op("or", ir.op("isnull", p), ir.op("isnull", q)), ir.lit(RT_ERROR, "int")),
                              (core, ir.lit(TRUE, "int"))], ir.lit(FALSE, "int"))
        return B(code=code, truth=core)
    if isinstance(x, S):
        if x.const is not None:
            return _const(_fold_order(symbol, x.const, y.value))
        return _string_vs_number(symbol, x, y, string_left=True)
    if y.const is not None:
        return _const(_fold_order(symbol, x.value, y.const))
    return _string_vs_number(symbol, y, x, string_left=False)


def compare(symbol: str, x, y) -> B:
    if symbol == "=":
        return equality(x, y)
    if symbol == "<>":
        return logic_not(equality(x, y))
    return ordering(symbol, x, y)


# -- the rest of the nodes -------------------------------------------------------------------

def negate(x):
    if isinstance(x, N):
        return N(java.negate(x.value))
    if isinstance(x, S):
        return _const(NULL, null_only=True)  # -'5' is NULL; a String never throws
    if x.const is not None:
        return _const(_null_of(x.const), null_only=True)
    if not x.can_throw:
        return _const(NULL, null_only=True)
    return _coded(NULL_OF_TABLE, x.code(), truth=ir.lit(False), null_only=True)


def is_null(x, negated: bool) -> B:
    if isinstance(x, N):
        return _const(TRUE if negated else FALSE)
    if isinstance(x, S):
        if x.const is not None:
            return _const(TRUE if negated else FALSE)
        return B(val=ir.op("isnotnull" if negated else "isnull", x.col))
    if x.plain:
        return B(val=ir.op("isnotnull" if negated else "isnull", x.val))
    return _lookup1(IS_NOT_NULL_TABLE if negated else IS_NULL_TABLE, x)


_MATCH_OPS = {"CONTAINS": "contains", "STARTSWITH": "startswith", "ENDSWITH": "endswith"}


def string_match(op_name: str, x, pattern: str, negated: bool) -> B:
    """CONTAINS/STARTSWITH/ENDSWITH: empty pattern, NULL or non-String operand → FALSE."""
    if pattern == "":
        return _const(FALSE)  # the operand is not even evaluated
    if isinstance(x, N):
        return _const(FALSE)
    if isinstance(x, B):
        if not x.can_throw:
            return _const(FALSE)
        return _lookup1(NOT_A_STRING_TABLE, x, truth=ir.lit(False))
    method = _MATCH_OPS[op_name]
    if x.const is not None:
        found = {"contains": pattern in x.const, "startswith": x.const.startswith(pattern),
                 "endswith": x.const.endswith(pattern)}[method]
        return _const(TRUE if found != negated else FALSE)
    test = ir.op(method, x.col, pattern)
    if negated:
        test = ir.op("not", test)
    return B(val=ir.op("coalesce", test, ir.lit(False)))


def membership(x: S, values: tuple[str, ...], negated: bool) -> B:
    if x.const is not None:  # the parser only allows a property here
        found = x.const in values
        return _const(TRUE if found != negated else FALSE)
    test = ir.op("isin", x.col, tuple(values))
    return B(val=ir.op("not", test) if negated else test)


def bool_cast(x: S) -> B:
    # NULL stays NULL; any String, even "true", is FALSE.
    return B(val=ir.op("case", [(ir.op("isnotnull", x.col), ir.lit(False))], ir.lit(None, "boolean")))


def between(x, low, high, negated: bool) -> B:
    if negated:
        return logic_or(ordering("<", x, low), ordering(">", x, high))
    return logic_and(ordering(">=", x, low), ordering("<=", x, high))


def _literal(node: n.Literal):
    if node.kind == "string":
        return S(ir.lit(node.value, "string"), const=node.value)
    if node.kind in ("int", "long", "double"):
        return N(node.value)
    return _const({"true": TRUE, "false": FALSE, "null": NULL}[node.kind], null_only=node.kind == "null")


def _visit(node: n.Node, kids: list):
    if isinstance(node, n.Property):
        return S(ir.op("prop", node.name))
    if isinstance(node, n.Literal):
        return _literal(node)
    if isinstance(node, n.BoolCast):
        return bool_cast(kids[0])
    if isinstance(node, n.Not):
        return logic_not(_as_b(kids[0], node))
    if isinstance(node, n.Negate):
        return negate(kids[0])
    if isinstance(node, n.Logical):
        x, y = _as_b(kids[0], node), _as_b(kids[1], node)
        return logic_and(x, y) if node.op == "AND" else logic_or(x, y)
    if isinstance(node, n.Comparison):
        return compare(node.op, kids[0], kids[1])
    if isinstance(node, n.IsNull):
        return is_null(kids[0], node.negated)
    if isinstance(node, n.Between):
        return between(kids[0], kids[1], kids[2], node.negated)
    if isinstance(node, n.In):
        return membership(kids[0], node.values, node.negated)
    if isinstance(node, n.StringMatch):
        return string_match(node.op, kids[0], node.pattern, node.negated)
    raise NotTranslatable(f"selector node {type(node).__name__}")


def _as_b(term, node: n.Node) -> B:
    if not isinstance(term, B):
        raise NotTranslatable(f"non-boolean operand of {canonical(node)}")
    return term


def canonical(node: n.Node) -> str:
    return n.canonical_form(node)


def _depth(root: n.Node) -> int:
    return n.fold(root, lambda node, kids: 1 + max(kids, default=0))


@dataclass(frozen=True)
class Translation:
    """The native form of one selector: IR for ``matches`` and for the three-valued result."""

    match: ir.Node          # boolean, never NULL
    value: ir.Node          # boolean, NULL for SQL NULL and for an exception
    error: ir.Node          # string: NULL, or the broker's exception class name
    size: int               # tree size of match, as Catalyst will see it


def translate_tree(tree: n.Node) -> Translation:
    """Translate a parsed selector; raises :class:`NotTranslatable` naming what is not expressible."""
    depth = _depth(tree)
    if depth > MAX_DEPTH:
        raise NotTranslatable(f"nesting depth {depth} (native translation stops at {MAX_DEPTH})")
    root = n.fold(tree, _visit)
    if not isinstance(root, B):
        raise NotTranslatable("non-boolean selector")
    if root.const is not None:
        match = ir.lit(root.const == TRUE)
        value = ir.lit({TRUE: True, FALSE: False}.get(root.const), "boolean")
        error = ir.lit(ERROR_NAMES.get(root.const), "string")
    elif root.plain:
        match = ir.op("coalesce", root.val, ir.lit(False))
        value = root.val
        error = ir.lit(None, "string")
    else:
        match = ir.op("coalesce", root.truth(), ir.lit(False))
        code = root.code()
        value = ir.op("table", (False, None, True, None, None), "boolean", code)
        error = ir.op("table", (None, None, None, ERROR_NAMES[RT_ERROR], ERROR_NAMES[CC_ERROR]), "string", code)
    size = max(ir.tree_size(match), ir.tree_size(value) + ir.tree_size(error))
    if size > MAX_TREE_SIZE:
        raise NotTranslatable(f"expression size {size} (native translation stops at {MAX_TREE_SIZE})")
    return Translation(match, value, error, size)
