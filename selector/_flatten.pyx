# The selector compiler's flattening pass in C (twin: _flatten_py.py, same code and results).
#
# The AST is Python objects, so this is the twin's loop with typed locals and lists, not a
# nogil kernel: what it saves is the interpreter's per-statement cost, about a third of an
# uncached compile's flattening.
from . import nodes as n
from .opcodes import (
    GUARD_NONE,
    GUARDS,
    MATCH,
    MAX_NODES,
    OP_AND,
    OP_BOOLCAST,
    OP_CONST,
    OP_EQ,
    OP_GE,
    OP_GT,
    OP_IN,
    OP_ISNULL,
    OP_LE,
    OP_LT,
    OP_NEG,
    OP_NOT,
    OP_NOT_IN,
    OP_OR,
    OP_PROP,
    ORDERING,
)

__all__ = ["flatten"]

_UNARY = {n.BoolCast: OP_BOOLCAST, n.Not: OP_NOT, n.Negate: OP_NEG}


def flatten(tree):
    """The flat node array of a parsed (and checked) AST: ``(columns, args, props)``.

    ``columns`` holds one list per NODE_DTYPE field (op, guard, a, b, parent,
    arg); ``args`` and ``props`` are those of :class:`selector.compiler.Program`.
    One iterative pass emits the post-order node array directly: a work stack
    holds AST nodes still to expand and ``(opcode, child count, argument)``
    entries to emit once their children are done, so desugaring (BETWEEN,
    ``<>``, IS NOT NULL) costs no intermediate tree.
    """
    cdef list ops = [], guards = [], first = [], second = [], parents = [], argv = [], args = []
    cdef dict arg_index = {}, slots = {}, guard_of
    cdef list done = []           # node indices of finished subtrees, innermost last
    cdef list work = [tree]
    cdef Py_ssize_t index, a, b, n_kids
    cdef object item, cls, op, value, slot
    Property, Literal, Logical, Comparison = n.Property, n.Literal, n.Logical, n.Comparison
    guard_of = GUARDS

    while work:
        item = work.pop()
        cls = type(item)
        if cls is tuple:
            op, n_kids, value = item
            index = len(ops)
            if index >= MAX_NODES:
                raise OverflowError(f"selector compiles to more than {MAX_NODES} nodes")
            if n_kids == 2:
                b = done.pop()
                a = done.pop()
                parents[b] = index
            elif n_kids == 1:
                a, b = done.pop(), -1
            else:
                a = b = -1
            if a >= 0:
                parents[a] = index
                if op in guard_of:
                    guards[a] = guard_of[op]
            ops.append(op)
            guards.append(GUARD_NONE)
            first.append(a)
            second.append(b)
            parents.append(-1)
            argv.append(-1 if value is None else _arg(value[0], args, arg_index))
            done.append(index)
        elif cls is Property or cls is Literal:
            index = len(ops)
            if index >= MAX_NODES:
                raise OverflowError(f"selector compiles to more than {MAX_NODES} nodes")
            if cls is Property:
                # Slots are numbered by first use in post-order, the order leaves come here.
                slot = slots.get(item.name)
                if slot is None:
                    slot = slots[item.name] = len(slots)
                ops.append(OP_PROP)
                argv.append(slot)
            else:
                ops.append(OP_CONST)
                argv.append(_arg(item.value, args, arg_index))
            guards.append(GUARD_NONE)
            first.append(-1)
            second.append(-1)
            parents.append(-1)
            done.append(index)
        elif cls is Logical:
            work += ((OP_AND if item.op == "AND" else OP_OR, 2, None), item.right, item.left)
        elif cls is Comparison:
            op = item.op
            if op == "=":
                work += ((OP_EQ, 2, None), item.right, item.left)
            elif op == "<>":
                work += ((OP_NOT, 1, None), (OP_EQ, 2, None), item.right, item.left)
            else:
                work += ((ORDERING[op], 2, None), item.right, item.left)
        elif cls in _UNARY:
            work += ((_UNARY[cls], 1, None), item.operand)
        elif cls is n.IsNull:
            if item.negated:
                work.append((OP_NOT, 1, None))
            work += ((OP_ISNULL, 1, None), item.operand)
        elif cls is n.Between:
            x = item.operand
            if item.negated:
                work += ((OP_OR, 2, None), (OP_GT, 2, None), item.high, x, (OP_LT, 2, None), item.low, x)
            else:
                work += ((OP_AND, 2, None), (OP_LE, 2, None), item.high, x, (OP_GE, 2, None), item.low, x)
        elif cls is n.In:
            work += ((OP_NOT_IN if item.negated else OP_IN, 1, (frozenset(item.values),)), item.operand)
        elif cls is n.StringMatch:
            if item.pattern == "":
                # FALSE without evaluating the operand; its properties still count as read.
                _register(item.operand, args, arg_index, slots)
                _emit_leaf(ops, guards, first, second, parents, argv, done, OP_CONST,
                           _arg(False, args, arg_index))
            else:
                op = MATCH[item.op] + (3 if item.negated else 0)
                work += ((op, 1, (item.pattern,)), item.operand)
        else:
            raise TypeError(f"unknown node {cls.__name__}")
    return (ops, guards, first, second, parents, argv), tuple(args), tuple(slots)


def _emit_leaf(list ops, list guards, list first, list second, list parents, list argv, list done,
               op, value):
    index = len(ops)
    if index >= MAX_NODES:
        raise OverflowError(f"selector compiles to more than {MAX_NODES} nodes")
    ops.append(op)
    guards.append(GUARD_NONE)
    first.append(-1)
    second.append(-1)
    parents.append(-1)
    argv.append(value)
    done.append(index)


def _register(tree, list args, dict arg_index, dict slots):
    """Number the slots and arguments of a subtree that is not emitted, in post-order."""
    def visit(node, kids):
        if isinstance(node, n.Property):
            slots.setdefault(node.name, len(slots))
        elif isinstance(node, n.Literal):
            _arg(node.value, args, arg_index)
        elif isinstance(node, n.In):
            _arg(frozenset(node.values), args, arg_index)
        elif isinstance(node, n.StringMatch):
            _arg(node.pattern if node.pattern else False, args, arg_index)
    n.fold(tree, visit)


cdef Py_ssize_t _arg(value, list args, dict arg_index) except -1:
    """The index of ``value`` in ``args`` (added at first use; equal values of one type share)."""
    key = (type(value), value)
    index = arg_index.get(key)
    if index is None:
        index = arg_index[key] = len(args)
        args.append(value)
    return index
