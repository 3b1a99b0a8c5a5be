"""Cython engine of the Python objects built from decoded columns: strs, property dicts, Messages (twin: ``_objects_py.py``).

For the APIs that hand out Python objects (``cq.Message``, ``Store.consume``): one str or
dict per row, built from the decoder's buffers (``_decode.pyx``), sharing equal strs.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcmp
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF

from .. import format as fmt
from ._bytes cimport _head

# message_objects passes the record fields before ``properties`` positionally
cdef Py_ssize_t _F_PROPERTIES = [name for name, _ in fmt.RECORD_FIELDS].index("properties")


# ------------------------------------------------------------------ columns -> Python objects
# For the APIs that hand out Python objects (cq.Message): one str or dict per row, built
# here from the decoder's buffers (valid UTF-8: the decoder replaced malformed bytes).

cdef inline bint _bytes_eq(const uint8_t* d, int32_t a, int32_t b, int32_t c, int32_t e) noexcept:
    return b - a == e - c and (b == a or memcmp(d + a, d + c, b - a) == 0)


cdef inline object _str_at(const uint8_t* d, int32_t a, int32_t b):
    if b <= a:
        return ""
    return PyUnicode_DecodeUTF8(<const char*>(d + a), b - a, NULL)


cdef inline const uint8_t* _data_ptr(const uint8_t[::1] d):
    return &d[0] if d.shape[0] else NULL


cdef extern from "Python.h":
    object _PyDict_NewPresized(Py_ssize_t minused)  # CPython: a dict with room for minused entries


cdef inline Py_ssize_t _row_at(const int64_t[::1] rows, bint all_rows, Py_ssize_t i, Py_ssize_t n) except -1:
    cdef Py_ssize_t r = i if all_rows else rows[i]
    if r < 0 or r >= n:
        raise IndexError(f"row {r} outside the {n} rows of the column")
    return r


def texts_list(const int32_t[::1] offsets, const uint8_t[::1] data, bint binary=False, const int64_t[::1] rows=None):
    """Rows of a text (or, with ``binary``, bytes) column as str (bytes): rows ``rows`` (default all), in order.

    A row whose bytes equal the previous row's reuses that object (a topic, a host: one str).
    """
    cdef Py_ssize_t i, r, n = offsets.shape[0] - 1, k
    cdef int32_t a, b, pa = 0, pb = 0
    cdef bint all_rows = rows is None
    if n < 0:
        raise ValueError("offsets must hold at least one entry")
    k = n if all_rows else rows.shape[0]
    cdef list out = [None] * k
    if offsets[n] > data.shape[0] or offsets[0] < 0:
        raise ValueError(f"offsets run to {offsets[n]}, past the {data.shape[0]} bytes of data")
    cdef const uint8_t* d = _data_ptr(data)
    prev = b"" if binary else ""
    for i in range(k):
        r = _row_at(rows, all_rows, i, n)
        a = offsets[r]
        b = offsets[r + 1]
        if not _bytes_eq(d, a, b, pa, pb):
            if binary:
                prev = PyBytes_FromStringAndSize(<const char*>(d + a), b - a) if b > a else b""
            else:
                prev = _str_at(d, a, b)
            pa = a
            pb = b
        out[i] = prev
    return out


# One str per distinct key text, and a few recent strs per key for its values: records of a
# topic carry the same keys, and many the same few values (a region, a tag, "true").
DEF KEY_SLOTS = 512       # hash table slots (a power of two)
DEF KEYS_CACHED = 256     # distinct keys remembered; later ones get a str each time
DEF VALUE_WAYS = 4        # values remembered per key


cdef struct KeySlot:
    int32_t ka, kb                    # the key's bytes in key_data
    PyObject* key                     # owned: the key's str
    int32_t va[VALUE_WAYS]
    int32_t vb[VALUE_WAYS]
    PyObject* value[VALUE_WAYS]       # owned or NULL: recent values' strs, their bytes at va:vb
    int next_way
    int32_t hits, misses              # a key whose values never repeat (an id) stops looking


cdef class _DictBuilder:
    """Property dicts of a decoded ``properties`` column, row by row, sharing strs between rows."""
    cdef const int32_t[::1] mo, ko, vo    # held: the pointers below point into them
    cdef const uint8_t[::1] kd, vd
    cdef const uint8_t* kp
    cdef const uint8_t* vp
    cdef KeySlot* slots
    cdef int32_t* by_place    # per entry place: the slot the previous row's key there used, or -1
    cdef Py_ssize_t places, cached, rows

    def __cinit__(self, const int32_t[::1] map_offsets, const int32_t[::1] key_offsets,
                  const uint8_t[::1] key_data, const int32_t[::1] value_offsets,
                  const uint8_t[::1] value_data):
        cdef Py_ssize_t n = map_offsets.shape[0] - 1
        if n < 0:
            raise ValueError("map offsets must hold at least one entry")
        if map_offsets[0] < 0 or map_offsets[n] > key_offsets.shape[0] - 1 or map_offsets[n] > value_offsets.shape[0] - 1:
            raise ValueError(f"map offsets run to entry {map_offsets[n]}, past the entries given")
        if map_offsets[n] > 0 and (key_offsets[map_offsets[n]] > key_data.shape[0]
                                   or value_offsets[map_offsets[n]] > value_data.shape[0]):
            raise ValueError("entry offsets run past their data")
        self.mo = map_offsets
        self.ko = key_offsets
        self.kd = key_data
        self.vo = value_offsets
        self.vd = value_data
        self.rows = n
        self.kp = &key_data[0] if key_data.shape[0] else NULL
        self.vp = &value_data[0] if value_data.shape[0] else NULL
        self.slots = <KeySlot*>calloc(KEY_SLOTS, sizeof(KeySlot))
        if self.slots == NULL:
            raise MemoryError()

    def __dealloc__(self):
        cdef Py_ssize_t i, w
        if self.slots != NULL:
            for i in range(KEY_SLOTS):
                Py_XDECREF(self.slots[i].key)
                for w in range(VALUE_WAYS):
                    Py_XDECREF(self.slots[i].value[w])
            free(self.slots)
        free(self.by_place)

    cdef int32_t _slot(self, int32_t a, int32_t b) except -2:
        # the slot holding key bytes kd[a:b], added if there is room; -1 when the table is full
        cdef uint64_t h = _head(self.kp + a, b - a) if b > a else 0
        cdef uint32_t i = <uint32_t>(((h ^ <uint64_t>(b - a)) * 0x9E3779B97F4A7C15ULL) >> 55) & (KEY_SLOTS - 1)
        cdef KeySlot* s
        while True:
            s = &self.slots[i]
            if s.key == NULL:
                if self.cached >= KEYS_CACHED:
                    return -1
                key = _str_at(self.kp, a, b)
                Py_INCREF(key)
                s.key = <PyObject*>key
                s.ka = a
                s.kb = b
                self.cached += 1
                return i
            if _bytes_eq(self.kp, s.ka, s.kb, a, b):
                return i
            i = (i + 1) & (KEY_SLOTS - 1)

    cdef object _value(self, KeySlot* s, int32_t a, int32_t b):
        cdef int w
        if s.misses >= 32 and 8 * s.hits < s.misses:
            return _str_at(self.vp, a, b)
        for w in range(VALUE_WAYS):
            if s.value[w] != NULL and _bytes_eq(self.vp, s.va[w], s.vb[w], a, b):
                s.hits += 1
                return <object>s.value[w]
        s.misses += 1
        value = _str_at(self.vp, a, b)
        w = s.next_way
        s.next_way = (w + 1) % VALUE_WAYS
        Py_XDECREF(s.value[w])
        Py_INCREF(value)
        s.value[w] = <PyObject*>value
        s.va[w] = a
        s.vb[w] = b
        return value

    cdef dict row(self, Py_ssize_t r):
        cdef int32_t e0 = self.mo[r], e1 = self.mo[r + 1], e, a, b, si
        cdef Py_ssize_t j
        cdef int32_t* grown
        cdef KeySlot* s
        cdef dict out = _PyDict_NewPresized(e1 - e0)
        if e1 - e0 > self.places:
            grown = <int32_t*>realloc(self.by_place, (e1 - e0) * sizeof(int32_t))
            if grown == NULL:
                raise MemoryError()
            self.by_place = grown
            for j in range(self.places, e1 - e0):
                grown[j] = -1
            self.places = e1 - e0
        for e in range(e0, e1):
            j = e - e0
            a = self.ko[e]
            b = self.ko[e + 1]
            si = self.by_place[j]
            if si < 0 or not _bytes_eq(self.kp, self.slots[si].ka, self.slots[si].kb, a, b):
                si = self._slot(a, b)
                self.by_place[j] = si
            if si < 0:  # more distinct keys than the table holds
                out[_str_at(self.kp, a, b)] = _str_at(self.vp, self.vo[e], self.vo[e + 1])
            else:
                s = &self.slots[si]
                out[<object>s.key] = self._value(s, self.vo[e], self.vo[e + 1])
        return out


def property_dicts(const int32_t[::1] map_offsets, const int32_t[::1] key_offsets, const uint8_t[::1] key_data,
                   const int32_t[::1] value_offsets, const uint8_t[::1] value_data, const int64_t[::1] rows=None):
    """Rows of a ``properties`` column as dicts (entries in order): rows ``rows`` (default all), in order.

    Records of a topic tend to carry the same keys, and many the same few values: each
    distinct key text is one str shared by the rows, and a value equal to one of the last
    few of its key reuses that str.
    """
    cdef _DictBuilder dicts = _DictBuilder(map_offsets, key_offsets, key_data, value_offsets, value_data)
    cdef Py_ssize_t i, n = dicts.rows
    cdef bint all_rows = rows is None
    cdef Py_ssize_t k = n if all_rows else rows.shape[0]
    cdef list out = [None] * k
    for i in range(k):
        out[i] = dicts.row(_row_at(rows, all_rows, i, n))
    return out


cdef inline object _text_reusing(const int32_t[::1] offsets, const uint8_t* d, Py_ssize_t r,
                                 int32_t* pa, int32_t* pb, object prev):
    # row r of a text column: ``prev`` (the last row built) when its bytes are equal
    cdef int32_t a = offsets[r], b = offsets[r + 1]
    if _bytes_eq(d, a, b, pa[0], pb[0]) and prev is not None:
        return prev
    pa[0] = a
    pb[0] = b
    return _str_at(d, a, b)


cdef extern from "Python.h":
    object PyObject_Vectorcall(object callable, PyObject** args, size_t nargsf, PyObject* kwnames)
    PyObject* PyTuple_GET_ITEM(object t, Py_ssize_t i)


cdef tuple _NO_ARGS = ()


cdef class _MessageBuilder:
    """``cls(*fields)`` of rows of a decoded column set (every record field), one at a time."""
    cdef object cls
    cdef object init        # cls.__init__ when cls is made by object.__new__: called without type()'s detour
    cdef _DictBuilder dicts
    cdef const int32_t[::1] c_size, c_magic, c_crc, c_qid, c_flag, c_sysf, c_recon
    cdef const int64_t[::1] c_qoff, c_phys, c_bts, c_sts, c_prep
    cdef const int32_t[::1] o_born, o_store, o_body, o_topic
    cdef const uint8_t[::1] d_born, d_store, d_body, d_topic   # held: the pointers point into them
    cdef const uint8_t* p_born
    cdef const uint8_t* p_store
    cdef const uint8_t* p_body
    cdef const uint8_t* p_topic
    cdef const int64_t[::1] rows, file_index, file_offsets
    cdef list paths
    cdef Py_ssize_t n, k
    cdef int32_t born_a, born_b, store_a, store_b, topic_a, topic_b
    cdef object born, store, body, topic

    def __cinit__(self, cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
                  const int64_t[::1] file_offsets):
        self.dicts = _DictBuilder(*columns["properties"])
        n = self.n = self.dicts.rows
        self.k = rows.shape[0]
        if file_index.shape[0] != self.k or file_offsets.shape[0] != self.k:
            raise ValueError(f"{self.k} rows need {self.k} file indices and offsets")
        for name, kind in fmt.RECORD_FIELDS[:_F_PROPERTIES]:
            if kind in ("i4", "i8") and len(columns[name]) != n:
                raise ValueError(f"column {name} holds {len(columns[name])} rows beside {n} rows of properties")
            if kind in ("str", "bin"):
                o, d = columns[name][0], columns[name][1]
                if len(o) != n + 1 or o[0] < 0 or o[n] > len(d):
                    raise ValueError(f"column {name}'s offsets do not fit {n} rows and its {len(d)} bytes")
        self.cls = cls
        if isinstance(cls, type) and cls.__new__ is object.__new__:
            self.init = cls.__init__
        self.c_size = columns["store_size"]
        self.c_magic = columns["magic_code"]
        self.c_crc = columns["body_crc"]
        self.c_qid = columns["queue_id"]
        self.c_flag = columns["flag"]
        self.c_sysf = columns["sys_flag"]
        self.c_recon = columns["reconsume_times"]
        self.c_qoff = columns["queue_offset"]
        self.c_phys = columns["commit_log_offset"]
        self.c_bts = columns["born_timestamp"]
        self.c_sts = columns["store_timestamp"]
        self.c_prep = columns["prepared_transaction_offset"]
        self.o_born, self.d_born = columns["born_host"][0], columns["born_host"][1]
        self.o_store, self.d_store = columns["store_host"][0], columns["store_host"][1]
        self.o_body, self.d_body = columns["body"][0], columns["body"][1]
        self.o_topic, self.d_topic = columns["topic"][0], columns["topic"][1]
        self.p_born = _data_ptr(self.d_born)
        self.p_store = _data_ptr(self.d_store)
        self.p_body = _data_ptr(self.d_body)
        self.p_topic = _data_ptr(self.d_topic)
        self.rows = rows
        self.file_index = file_index
        self.file_offsets = file_offsets
        self.paths = paths

    cdef object build(self, Py_ssize_t i):
        cdef Py_ssize_t r = self.rows[i]
        cdef int64_t f = self.file_index[i]
        if r < 0 or r >= self.n:
            raise IndexError(f"row {r} outside the {self.n} rows of the columns")
        if f < 0 or f >= len(self.paths):
            raise IndexError(f"file index {f} outside the {len(self.paths)} paths")
        self.born = _text_reusing(self.o_born, self.p_born, r, &self.born_a, &self.born_b, self.born)
        self.store = _text_reusing(self.o_store, self.p_store, r, &self.store_a, &self.store_b, self.store)
        # (bodies differ from message to message: each its own bytes, no comparison)
        self.body = PyBytes_FromStringAndSize(<const char*>(self.p_body + self.o_body[r]),
                                              self.o_body[r + 1] - self.o_body[r])
        self.topic = _text_reusing(self.o_topic, self.p_topic, r, &self.topic_a, &self.topic_b, self.topic)
        fields = (self.c_size[r], self.c_magic[r], self.c_crc[r], self.c_qid[r], self.c_flag[r], self.c_qoff[r],
                  self.c_phys[r], self.c_sysf[r], self.c_bts[r], self.born, self.c_sts[r], self.store,
                  self.c_recon[r], self.c_prep[r], self.body, self.topic, self.dicts.row(r), self.paths[f],
                  self.file_offsets[i])
        if self.init is None:
            return self.cls(*fields)
        # what cls(*fields) does for a class that object.__new__ makes: allocate, then __init__
        # with the fields in place (no argument tuple rebuilt, no lookup of __init__ per call)
        cdef PyObject* args[32]
        cdef Py_ssize_t j, m = len(fields)
        obj = (<PyTypeObject*>self.cls).tp_new(self.cls, <PyObject*>_NO_ARGS, NULL)
        args[0] = <PyObject*>obj
        for j in range(m):
            args[j + 1] = PyTuple_GET_ITEM(fields, j)
        PyObject_Vectorcall(self.init, args, m + 1, NULL)
        return obj


def message_objects(cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
                    const int64_t[::1] file_offsets):
    """``cls(*fields)`` for rows ``rows`` of a decoded column set (every record field), in order.

    The positional fields are ``cq.format.RECORD_FIELDS`` up to ``properties``
    (``tags`` and ``keys`` are not passed), then ``paths[file_index[i]]`` and
    ``file_offsets[i]``: ``cq.Message``'s order. Strs are shared as
    :func:`texts_list` and :func:`property_dicts` share them.
    """
    cdef _MessageBuilder b = _MessageBuilder(cls, columns, rows, file_index, paths, file_offsets)
    cdef Py_ssize_t i
    cdef list out = [None] * b.k
    for i in range(b.k):
        out[i] = b.build(i)
    return out


cdef class Delivered:
    """An iterator handing out messages and counting each in ``stats.delivered`` as it goes.

    ``Delivered(items, stats)`` hands out ``items`` (a list, or any iterable);
    ``Delivered.built(...)`` (:func:`message_objects`' arguments, then ``stats``) builds
    each message only when it is handed out, so a consumer that lets each go holds one
    at a time.
    """
    cdef object it          # the items' iterator, or None when the builder builds them
    cdef _MessageBuilder builder
    cdef Py_ssize_t i
    cdef object stats

    def __init__(self, items, stats):
        self.it = iter(items)
        self.stats = stats

    @staticmethod
    def built(message_cls, dict columns, const int64_t[::1] rows, const int64_t[::1] file_index, list paths,
              const int64_t[::1] file_offsets, stats):
        cdef Delivered d = Delivered((), stats)
        d.it = None
        d.builder = _MessageBuilder(message_cls, columns, rows, file_index, paths, file_offsets)
        return d

    def __iter__(self):
        return self

    def __next__(self):
        if self.it is not None:
            msg = next(self.it)
        elif self.i >= self.builder.k:
            raise StopIteration
        else:
            msg = self.builder.build(self.i)
            self.i += 1
        self.stats.delivered += 1
        return msg
