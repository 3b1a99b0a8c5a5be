# The selector's LALR driver and scanner in C (twin: _lalr_py.py).
#
# The same tokens as selector.lexer (the PLY rules; see scan_token for each one) and the same
# loop as _lalr_py.Parser over PLY's tables, flattened into C arrays. Reductions stay Python
# (they build selector.nodes and run the broker's parse-time checks); only the token loop and
# the state machine are compiled.
from cpython.unicode cimport PyUnicode_READ, PyUnicode_KIND, PyUnicode_DATA, PyUnicode_GET_LENGTH
from libc.stdint cimport int32_t
from libc.stdlib cimport malloc, realloc, free

from .lexer import lexical_error

__all__ = ["Parser", "scan"]

cdef int32_t NONE = 0x7FFFFFFF      # no action / no goto / not defaulted

# Token kinds of the scanner: indexes into Parser.kind_names (PLY's token names).
cdef enum:
    K_ID = 0
    K_DECIMAL
    K_FLOATING
    K_STRING
    K_EQ
    K_NE
    K_GT
    K_GE
    K_LT
    K_LE
    K_LPAREN
    K_RPAREN
    K_COMMA
    K_PLUS
    K_MINUS
    K_NOT
    K_AND
    K_OR
    K_BETWEEN
    K_IN
    K_TRUE
    K_FALSE
    K_NULL
    K_IS
    K_CONTAINS
    K_STARTSWITH
    K_ENDSWITH
    K_END               # "$end"
    N_KINDS

KIND_NAMES = ("ID", "DECIMAL", "FLOATING", "STRING", "EQ", "NE", "GT", "GE", "LT", "LE", "LPAREN",
              "RPAREN", "COMMA", "PLUS", "MINUS", "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE",
              "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH", "$end")
OPERATOR_VALUES = {K_EQ: "=", K_NE: "<>", K_GT: ">", K_GE: ">=", K_LT: "<", K_LE: "<=", K_LPAREN: "(",
                   K_RPAREN: ")", K_COMMA: ",", K_PLUS: "+", K_MINUS: "-"}
KEYWORD_KINDS = {name: KIND_NAMES.index(name) for name in KIND_NAMES[K_NOT:K_END]}

# Scanner results besides a token.
cdef enum:
    SCAN_TOKEN = 0
    SCAN_END = 1
    SCAN_ERROR = 2


cdef inline bint is_digit(Py_UCS4 c) noexcept nogil:
    return c >= u'0' and c <= u'9'


cdef inline bint is_id_start(Py_UCS4 c) noexcept nogil:
    return (c >= u'a' and c <= u'z') or (c >= u'A' and c <= u'Z') or c == u'_' or c == u'$'


cdef inline bint is_id_part(Py_UCS4 c) noexcept nogil:
    return is_id_start(c) or is_digit(c)


cdef inline bint is_space(Py_UCS4 c) noexcept nogil:
    return c == u' ' or c == u'\t' or c == u'\n' or c == u'\r' or c == u'\f'


cdef class Scanner:
    """Tokens of one text, pulled one at a time (the rules and their order are PLY's)."""
    cdef str text
    cdef int ukind
    cdef void* data
    cdef Py_ssize_t n
    cdef Py_ssize_t pos
    cdef Py_ssize_t last_eol        # offset of the last LF or CR, -1 if none
    cdef Py_ssize_t next_lf         # the first LF at or after the last "--" comment, -1 if none
    cdef Py_ssize_t next_cr         # the same for CR (kept so many comments stay linear)
    # the token just scanned
    cdef int kind
    cdef Py_ssize_t start
    cdef object value

    def __cinit__(self, str text):
        self.text = text
        self.ukind = PyUnicode_KIND(text)
        self.data = PyUnicode_DATA(text)
        self.n = PyUnicode_GET_LENGTH(text)
        self.pos = 0
        self.last_eol = max(text.rfind("\n"), text.rfind("\r"))
        self.next_lf = self.next_cr = -2   # not searched yet

    cdef inline Py_UCS4 at(self, Py_ssize_t i) noexcept:
        """The character at ``i``, or 0 past the end (0 matches no rule's first character)."""
        if i >= self.n:
            return 0
        return PyUnicode_READ(self.ukind, self.data, i)

    cdef Py_ssize_t digits(self, Py_ssize_t i) noexcept:
        while i < self.n and is_digit(self.at(i)):
            i += 1
        return i

    cdef Py_ssize_t exponent(self, Py_ssize_t i) noexcept:
        """End of ``[eE][+-]?[0-9]+`` at ``i``, or -1 if there is none."""
        cdef Py_ssize_t j
        cdef Py_UCS4 c = self.at(i)
        if c != u'e' and c != u'E':
            return -1
        j = i + 1
        c = self.at(j)
        if c == u'+' or c == u'-':
            j += 1
        if not is_digit(self.at(j)):
            return -1
        return self.digits(j)

    cdef int scan_token(self) except -1:
        """Scan the next token into kind/start/value; SCAN_END at the end, SCAN_ERROR (with
        ``start`` at the offending character) where no rule matches."""
        cdef Py_ssize_t p, j, q, last_pair, end
        cdef Py_UCS4 c, d
        cdef str text = self.text
        while True:
            p = self.pos
            while p < self.n and is_space(self.at(p)):
                p += 1
            self.start = p
            if p >= self.n:
                self.pos = p
                return SCAN_END
            c = self.at(p)
            d = self.at(p + 1)
            if c == u'/' and d == u'*':
                # /\*(?:[^*]|\*(?!/))*\*/ : up to the first "*/" after the opening
                j = text.find("*/", p + 2)
                if j < 0:
                    return SCAN_ERROR
                self.pos = j + 2
                continue
            if c == u"'":
                # '(?:[^']++|'')*' : '' pairs are quotes inside; with no closing quote after the
                # last pair, the regex backtracks and that pair's first quote closes the literal.
                j = p + 1
                last_pair = -1
                while True:
                    q = text.find("'", j)
                    if q < 0:
                        if last_pair < 0:
                            return SCAN_ERROR
                        end = last_pair
                        break
                    if self.at(q + 1) == u"'":
                        last_pair = q
                        j = q + 2
                        continue
                    end = q
                    break
                value = text[p + 1:end]
                if "''" in value:
                    value = value.replace("''", "'")
                self.value = value
                self.kind = K_STRING
                self.pos = end + 1
                return SCAN_TOKEN
            if is_digit(c) or (c == u'.' and is_digit(d)):
                # FLOATING, tried first: [0-9]+\.[0-9]*(exp)? | \.[0-9]+(exp)? | [0-9]+(exp)
                j = self.digits(p)
                end = -1
                if self.at(j) == u'.':
                    end = self.digits(j + 1)
                    q = self.exponent(end)
                    if q >= 0:
                        end = q
                elif j > p:
                    end = self.exponent(j)
                if end >= 0:
                    self.kind = K_FLOATING
                else:
                    # DECIMAL: [1-9][0-9]*[lL]? | 0
                    self.kind = K_DECIMAL
                    if c == u'0':
                        end = p + 1
                    else:
                        end = j
                        d = self.at(end)
                        if d == u'l' or d == u'L':
                            end += 1
                self.value = text[p:end]
                self.pos = end
                return SCAN_TOKEN
            if is_id_start(c):
                j = p + 1
                while j < self.n and is_id_part(self.at(j)):
                    j += 1
                value = text[p:j]
                self.value = value
                self.kind = KEYWORD_KINDS.get(value.upper(), K_ID)
                self.pos = j
                return SCAN_TOKEN
            self.pos = p + 1
            if c == u'<':
                if d == u'>':
                    self.kind = K_NE
                    self.pos = p + 2
                elif d == u'=':
                    self.kind = K_LE
                    self.pos = p + 2
                else:
                    self.kind = K_LT
            elif c == u'>':
                if d == u'=':
                    self.kind = K_GE
                    self.pos = p + 2
                else:
                    self.kind = K_GT
            elif c == u'=':
                self.kind = K_EQ
            elif c == u'(':
                self.kind = K_LPAREN
            elif c == u')':
                self.kind = K_RPAREN
            elif c == u',':
                self.kind = K_COMMA
            elif c == u'+':
                self.kind = K_PLUS
            elif c == u'-':
                if d == u'-' and self.last_eol > p:
                    # "--" with a line terminator after it: a comment up to that terminator.
                    if self.next_lf != -1 and self.next_lf < p:
                        self.next_lf = text.find("\n", p)
                    if self.next_cr != -1 and self.next_cr < p:
                        self.next_cr = text.find("\r", p)
                    j = self.next_lf
                    q = self.next_cr
                    end = j if q < 0 or (0 <= j < q) else q
                    self.pos = end + (2 if self.at(end) == u'\r' and self.at(end + 1) == u'\n' else 1)
                    continue
                self.kind = K_MINUS
            else:
                self.pos = p
                return SCAN_ERROR
            self.value = OPERATOR_VALUES[self.kind]
            return SCAN_TOKEN


cdef class Parser:
    """PLY's LALR tables in C arrays and the driver loop (see _lalr_py.Parser: same
    parameters, same results)."""
    cdef int32_t n_states
    cdef int32_t n_nonterminals
    cdef int32_t* action       # [state * N_KINDS + kind]
    cdef int32_t* defaulted    # [state], NONE if the state reads a lookahead
    cdef int32_t* goto_        # [state * n_nonterminals + nonterminal]
    cdef int32_t* lhs          # [production]: its nonterminal's number
    cdef int32_t* length       # [production]: right-hand side length
    cdef list rules            # [production]: reduction, or None to pass the value through
    cdef object syntax_error
    cdef object lexical_error

    def __cinit__(self, actions, gotos, defaulted, productions, syntax_error, lexical_error):
        cdef Py_ssize_t s, k, i
        kind_of = {name: i for i, name in enumerate(KIND_NAMES)}
        nonterminals = sorted({name for name, _length, _rule in productions})
        nt_of = {name: i for i, name in enumerate(nonterminals)}
        self.n_states = len(actions)
        self.n_nonterminals = len(nonterminals)
        self.action = <int32_t*>malloc(self.n_states * N_KINDS * sizeof(int32_t))
        self.defaulted = <int32_t*>malloc(self.n_states * sizeof(int32_t))
        self.goto_ = <int32_t*>malloc(self.n_states * self.n_nonterminals * sizeof(int32_t))
        self.lhs = <int32_t*>malloc(len(productions) * sizeof(int32_t))
        self.length = <int32_t*>malloc(len(productions) * sizeof(int32_t))
        if not (self.action and self.defaulted and self.goto_ and self.lhs and self.length):
            raise MemoryError()
        for s in range(self.n_states):
            self.defaulted[s] = defaulted.get(s, NONE)
            for k in range(N_KINDS):
                self.action[s * N_KINDS + k] = NONE
            for name, t in actions[s].items():
                if name not in kind_of:
                    raise ValueError(f"grammar token {name!r} is not one the scanner produces")
                self.action[s * N_KINDS + kind_of[name]] = t
            for k in range(self.n_nonterminals):
                self.goto_[s * self.n_nonterminals + k] = NONE
            for name, t in gotos.get(s, {}).items():
                self.goto_[s * self.n_nonterminals + nt_of[name]] = t
        self.rules = []
        for i, (name, n, rule) in enumerate(productions):
            self.lhs[i] = nt_of[name]
            self.length[i] = n
            self.rules.append(rule)
        self.syntax_error = syntax_error
        self.lexical_error = lexical_error

    def __dealloc__(self):
        free(self.action)
        free(self.defaulted)
        free(self.goto_)
        free(self.lhs)
        free(self.length)

    def parse(self, str text):
        """``(tree, stop)``: the tree built by the reductions and the offset of the token
        where parsing stopped (None if it read the whole text)."""
        cdef Scanner scanner = Scanner(text)
        cdef int32_t* states = <int32_t*>malloc(64 * sizeof(int32_t))
        cdef Py_ssize_t* poss = <Py_ssize_t*>malloc(64 * sizeof(Py_ssize_t))
        cdef Py_ssize_t capacity = 64, top = 0, j, base
        cdef int32_t state = 0, t, prod, n
        cdef int kind = -1                  # lookahead; -1: not read yet
        cdef int scanned = -1               # kind of the last token scanned (value, where)
        cdef Py_ssize_t where = -1, stop = -1
        cdef int stop_kind = -1, r
        cdef object value = None, stop_value = None, rule, result
        cdef list vals = [None]
        cdef list vs, ps
        if states == NULL or poss == NULL:
            free(states)
            free(poss)
            raise MemoryError()
        states[0] = 0
        poss[0] = -1
        try:
            while True:
                t = self.defaulted[state]
                if t == NONE:
                    if kind < 0:
                        r = scanner.scan_token()
                        if r == SCAN_TOKEN:
                            kind = scanned = scanner.kind
                            value, where = scanner.value, scanner.start
                        elif r == SCAN_END:
                            kind, value, where = K_END, None, scanner.n
                        elif scanned < 0:
                            self.lexical_error(text, scanner.start, None, None, None)
                        else:
                            self.lexical_error(text, scanner.start, KIND_NAMES[scanned], value, where)
                    t = self.action[state * N_KINDS + kind]
                    if t == NONE:
                        if kind != K_END and stop < 0:
                            # First error: the broker stops here if what came before is complete.
                            stop, stop_kind, stop_value = where, kind, value
                            kind = K_END
                            continue
                        if stop < 0:
                            self.syntax_error(None, None, scanner.n)
                        self.syntax_error(KIND_NAMES[stop_kind], stop_value, stop)
                if t > 0:
                    top += 1
                    if top == capacity:
                        capacity *= 2
                        states = <int32_t*>grow(states, capacity * sizeof(int32_t))
                        poss = <Py_ssize_t*>grow(poss, capacity * sizeof(Py_ssize_t))
                    states[top] = t
                    poss[top] = where
                    vals.append(value)
                    state = t
                    kind = -1
                elif t < 0:
                    prod = -t
                    n = self.length[prod]
                    rule = self.rules[prod]
                    if rule is None:
                        # A pass-through unit production: only the top state changes.
                        state = self.goto_[states[top - 1] * self.n_nonterminals + self.lhs[prod]]
                        states[top] = state
                        continue
                    base = top - n + 1
                    vs = vals[base:top + 1]
                    ps = [None if poss[j] < 0 else poss[j] for j in range(base, top + 1)]
                    result = rule(vs, ps)
                    del vals[base:top + 1]
                    top = base
                    state = self.goto_[states[top - 1] * self.n_nonterminals + self.lhs[prod]]
                    states[top] = state
                    poss[top] = -1
                    vals.append(result)
                else:
                    return vals[top], None if stop < 0 else stop
        finally:
            free(states)
            free(poss)


cdef void* grow(void* block, size_t size) except NULL:
    cdef void* bigger = realloc(block, size)
    if bigger == NULL:
        raise MemoryError()
    return bigger


def scan(str text):
    """Every token of ``text``, as :func:`selector.lexer.scan` returns them (this engine's
    scanner, for the tests)."""
    cdef Scanner scanner = Scanner(text)
    cdef int r
    kinds, values, positions = [], [], []
    while True:
        r = scanner.scan_token()
        if r == SCAN_END:
            return kinds, values, positions, None
        if r == SCAN_ERROR:
            return kinds, values, positions, lexical_error(text, scanner.start)
        kinds.append(KIND_NAMES[scanner.kind])
        values.append(scanner.value)
        positions.append(scanner.start)
