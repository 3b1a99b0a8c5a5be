"""Fuzz target: the SQL92 parser and both evaluators on arbitrary text and properties.

The engine's scanner and LALR driver (``_lalr.pyx``) must give the same tree,
stop offset or error (text, position, cause) as PLY's own lexer and driver;
only ``SelectorSyntaxError`` may escape ``compile``; only
``SelectorEvaluationError`` may escape ``evaluate``; the Cython engine and the
pure-Python twin must return the same result code for every input; the
canonical form must reparse to the same canonical form.
"""
import sys

import atheris

with atheris.instrument_imports():
    import selector
    from selector import _eval, _eval_py
    from selector.compiler import compile_tree
    from selector.nodes import canonical_form
    from selector.parser import _parse_reference, parse

NAMES = ("a", "b", "TAGS", "s", "x")
VALUES = ("1", "5", "-0.0", "NaN", "abc", " 7 ", "0x1p3", "true", "٣", "3000000000", "1e400", "", "x'y")


def _parsed(parse_function, sql: str):
    try:
        result = parse_function(sql)
    except selector.SelectorSyntaxError as exc:
        return ("error", str(exc), exc.position, exc.cause)
    return ("ok", canonical_form(result.tree), result.stop)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    sql = fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 400))
    fast = _parsed(parse, sql)
    assert fast == _parsed(_parse_reference, sql), (sql, fast)
    try:
        program = compile_tree(parse(sql).tree)
    except selector.SelectorSyntaxError as exc:
        assert 0 <= exc.position <= len(sql), (sql, exc.position)
        return
    rows = []
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        row = {}
        for name in NAMES:
            pick = fdp.ConsumeIntInRange(0, len(VALUES))
            if pick < len(VALUES) and VALUES[pick]:
                row[name] = VALUES[pick]
        rows.append(row)
    fast, slow = _eval.Evaluator(program), _eval_py.Evaluator(program)
    assert fast.evaluate_many(rows).tolist() == slow.evaluate_many(rows).tolist(), (sql, rows)
    text = selector.canonical(sql)
    assert selector.canonical(text) == text, (sql, text)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
