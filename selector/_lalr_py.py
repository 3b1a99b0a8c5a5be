"""Pure-Python twin of the selector's LALR driver (``_lalr.pyx``).

:class:`Parser` runs PLY's LALR tables over the tokens of
:func:`selector.lexer.scan`. The loop is PLY's own (``LRParser.parse``:
defaulted states, shift, reduce, accept) with the broker's stop rule (spec
docs/selector-semantics.md#no-end-of-input-check) in place of PLY's error recovery: at the first token that cannot
continue, parsing goes on as if the input ended there; a second error is the
syntax error, reported at that first token. ``selector.parser`` builds the
tables and the reductions and turns the results into trees and errors.
"""
from __future__ import annotations

from .lexer import scan

__all__ = ["Parser", "scan"]


class Parser:
    """A driver for one grammar.

    Parameters
    ----------
    actions : dict
        state -> {token type: shift (> 0), reduce (< 0, minus the production), accept (0)}.
    gotos : dict
        state -> {nonterminal: state}.
    defaulted : dict
        state -> the reduction it makes without reading a lookahead.
    productions : list of (str, int, callable or None)
        Per production number: its nonterminal, its right-hand side length and its
        reduction, called as ``rule(values, positions)`` (token offsets; None for
        nonterminals); None for a unit production that passes its value through.
    syntax_error : callable
        ``syntax_error(kind, value, position)`` raises the error for a token that cannot
        be parsed (``kind`` None: end of input).
    lexical_error : callable
        ``lexical_error(text, position, kind, value, where)`` raises the error for text
        that cannot be lexed at ``position``; kind, value and where describe the token
        read before it (kind None if none).
    """

    def __init__(self, actions, gotos, defaulted, productions, syntax_error, lexical_error):
        self.gotos = gotos
        self.defaulted = defaulted
        self.productions = productions
        self.syntax_error = syntax_error
        self.lexical_error = lexical_error
        # state -> its action row, or None for a defaulted state (a list index is cheaper).
        self.table = [None if state in defaulted else actions[state] for state in range(len(actions))]
        self.chains = _pass_through_chains(actions, gotos, defaulted, productions)

    def parse(self, text: str):
        """``(tree, stop)``: the tree built by the reductions and the offset of the token
        where parsing stopped (None if it read the whole text)."""
        kinds, values, positions, lex_error = scan(text)
        n_tokens = len(kinds)
        table, gotos, defaulted, productions, chains = (
            self.table, self.gotos, self.defaulted, self.productions, self.chains)
        states = [0]
        vals: list = [None]
        poss: list = [None]
        state = 0
        i = 0                # next token
        kind = None          # lookahead type; None: not read yet
        value = where = None
        stop = None          # index of the token where the parse stopped (docs/selector-semantics.md#no-end-of-input-check)
        while True:
            row = table[state]
            if row is None:
                t = defaulted[state]
            else:
                if kind is None:
                    if i < n_tokens:
                        kind, value, where = kinds[i], values[i], positions[i]
                        i += 1
                    elif lex_error is not None:
                        if i:
                            self.lexical_error(text, lex_error.position, kinds[i - 1], values[i - 1],
                                               positions[i - 1])
                        self.lexical_error(text, lex_error.position, None, None, None)
                    else:
                        kind, value, where = "$end", None, len(text)
                t = row.get(kind)
                if t is None:
                    if kind != "$end" and stop is None:
                        # First error: the broker stops here if what came before is complete.
                        stop = i - 1
                        kind = "$end"
                        continue
                    if stop is None:
                        self.syntax_error(None, None, len(text))
                    self.syntax_error(kinds[stop], values[stop], positions[stop])
            if t > 0:
                states.append(t)
                vals.append(value)
                poss.append(where)
                state = t
                kind = None
            elif t < 0:
                name, length, rule = productions[-t]
                if rule is None:
                    if kind is None:
                        state = gotos[states[-2]][name]
                    else:
                        state = chains[states[-2], -t, kind]
                    states[-1] = state
                    continue
                result = rule(vals[-length:], poss[-length:])
                del states[-length:], vals[-length:], poss[-length:]
                state = gotos[states[-1]][name]
                states.append(state)
                vals.append(result)
                poss.append(None)
            else:
                return vals[-1], None if stop is None else positions[stop]


def _pass_through_chains(actions, gotos, defaulted, productions) -> dict:
    """(state below, production, lookahead) -> the state after that pass-through reduction and
    every pass-through reduction it leads to (``primary`` to ``unary`` to ``cmp_expr`` ...).

    Each of them replaces only the top state, so where the chain ends depends only on the
    state below, the first production and the lookahead: one lookup instead of a loop
    iteration per step.
    """
    chains = {}
    lookaheads = {kind for row in actions.values() for kind in row}
    for number, (name, length, rule) in enumerate(productions):
        if rule is not None or length != 1:
            continue
        for below, row in gotos.items():
            if name not in row:
                continue
            for kind in lookaheads:
                state = row[name]
                while True:
                    t = defaulted[state] if state in defaulted else actions[state].get(kind)
                    if t is None or t >= 0:
                        break
                    nxt, nxt_length, nxt_rule = productions[-t]
                    if nxt_rule is not None or nxt_length != 1:
                        break
                    state = row[nxt]
                chains[below, number, kind] = state
    return chains
