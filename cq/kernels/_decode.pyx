"""Cython engine of the data path's decoder: CommitLog records straight into Arrow buffers (twin: ``_decode_py.py``).

``decode_columns`` parses each record (``_record.pxd``'s ``_parse``) and appends the asked
fields to growable buffers (``_pool.pxd``) without the GIL: text UTF-8 checked and
replaced, hosts written as text, the properties split into a map. ``copy_records`` reads
records out of the files into one buffer for it (docs/data-path.md).
"""
import numpy as np

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memchr, memcmp, memcpy, memset
from posix.unistd cimport pread

from .. import format as fmt
from ._bytes cimport _head, rmq_ctz64, rmq_load_be32, rmq_load_be64, rmq_load_le64, rmq_prefetch
from ._layout cimport (RMQ_IPV6_WIDTH, RMQ_NAME_VALUE_SEP, RMQ_PORT_WIDTH, RMQ_PROPERTY_KEYS, RMQ_PROPERTY_SEP,
                       RMQ_PROPERTY_TAGS, RMQ_REC_BODY_CRC, RMQ_REC_BORN_HOST, RMQ_REC_BORN_TS, RMQ_REC_FLAG,
                       RMQ_REC_HEAD, RMQ_REC_PHYS, RMQ_REC_QUEUE_ID, RMQ_REC_QUEUE_OFFSET, RMQ_REC_TAIL_PREPARED,
                       RMQ_REC_TOTAL, RMQ_STORE_TS_WIDTH)
from ._pool cimport (GBuf, _pool_get, _pool_put, _pooled_zeros, _put, _put_i32, _reserve, _reserve_rows, _room,
                     _take)
from ._record cimport Rec, _parse, _parse_error

cdef extern from "arpa/inet.h" nogil:
    const char* inet_ntop(int af, const void* src, char* dst, unsigned int size)

cdef extern from "sys/socket.h" nogil:
    int AF_INET6

cdef bytes _TAGS_NAME = RMQ_PROPERTY_TAGS
cdef bytes _KEYS_NAME = RMQ_PROPERTY_KEYS
cdef const char* TAGS_NAME = _TAGS_NAME
cdef const char* KEYS_NAME = _KEYS_NAME
cdef int64_t TAGS_LEN = len(_TAGS_NAME)
cdef int64_t KEYS_LEN = len(_KEYS_NAME)
assert RMQ_NAME_VALUE_SEP < 0x7F and RMQ_PROPERTY_SEP < 0x7F
# every byte of a word, set to one past the larger separator: the SWAR scan of ASCII text for them
cdef uint64_t SEP_BOUND = 0x0101010101010101ULL * (max(RMQ_NAME_VALUE_SEP, RMQ_PROPERTY_SEP) + 1)


# ------------------------------------------------------------------ the decoder
# decode_columns: CommitLog records straight into Arrow buffers (docs/data-path.md).

cdef inline int64_t _ascii_prefix(const uint8_t* s, int64_t n) noexcept nogil:
    # Length of the leading run of bytes < 0x80, eight at a time.
    cdef int64_t i = 0
    cdef uint64_t w
    while i + 8 <= n:
        memcpy(&w, s + i, 8)
        if w & 0x8080808080808080ULL:
            break
        i += 8
    while i < n and s[i] < 0x80:
        i += 1
    return i


cdef inline void _copy(uint8_t* d, const uint8_t* s, int64_t n) noexcept nogil:
    # memcpy for the short strings of a record (keys, values), without a call per string:
    # two overlapping fixed-size copies cover any length from 4 to 16.
    if n >= 8:
        if n > 16:
            memcpy(d, s, n)
        else:
            memcpy(d, s, 8)
            memcpy(d + n - 8, s + n - 8, 8)
    elif n >= 4:
        memcpy(d, s, 4)
        memcpy(d + n - 4, s + n - 4, 4)
    else:
        while n > 0:
            n -= 1
            d[n] = s[n]


cdef int64_t _utf8_into(uint8_t* out, const uint8_t* s, int64_t n) noexcept nogil:
    # Write ``s`` to ``out`` (room for 3 * n bytes) as UTF-8, each maximal ill-formed
    # subpart replaced by U+FFFD (EF BF BD): what bytes.decode("utf-8", "replace")
    # then encode gives. Returns the bytes written.
    cdef int64_t i, o, j, need, run
    cdef uint8_t c, c1, lo, hi
    i = _ascii_prefix(s, n)
    _copy(out, s, i)
    if i == n:  # the common case: plain ASCII
        return n
    o = i
    while i < n:
        c = s[i]
        if c < 0x80:
            run = _ascii_prefix(s + i, n - i)
            _copy(out + o, s + i, run)
            o += run
            i += run
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif c == 0xE0:
            need = 2
            lo = 0xA0
        elif (0xE1 <= c <= 0xEC) or c == 0xEE or c == 0xEF:
            need = 2
        elif c == 0xED:
            need = 2
            hi = 0x9F
        elif c == 0xF0:
            need = 3
            lo = 0x90
        elif 0xF1 <= c <= 0xF3:
            need = 3
        elif c == 0xF4:
            need = 3
            hi = 0x8F
        else:
            need = 0
        j = 1
        if need:
            while j <= need and i + j < n:
                c1 = s[i + j]
                if j == 1:
                    if c1 < lo or c1 > hi:
                        break
                elif c1 < 0x80 or c1 > 0xBF:
                    break
                j += 1
        if need and j > need:
            memcpy(out + o, s + i, need + 1)
            o += need + 1
            i += need + 1
        else:
            out[o] = 0xEF
            out[o + 1] = 0xBF
            out[o + 2] = 0xBD
            o += 3
            i += j
    return o


cdef inline int _put_utf8(GBuf* g, const uint8_t* s, int64_t n) noexcept nogil:
    if _reserve(g, 3 * n) < 0:
        return -1
    g.n += _utf8_into(g.p + g.n, s, n)
    return 0


cdef inline int64_t _put_uint(char* out, uint32_t v) noexcept nogil:
    cdef char tmp[12]
    cdef int64_t n = 0, k
    if v == 0:
        out[0] = 48
        return 1
    while v:
        tmp[n] = <char>(48 + v % 10)
        v //= 10
        n += 1
    for k in range(n):
        out[k] = tmp[n - 1 - k]
    return n


cdef int _put_host(GBuf* g, const uint8_t* ip, bint v6, int32_t port) noexcept nogil:
    # "a.b.c.d:port" / "[ipv6]:port", the text read_message gives (libc inet_ntop, as
    # Python's socket.inet_ntop); the port is the stored int32, signed.
    cdef char* out
    cdef int64_t o = 0, k
    if _reserve(g, 80) < 0:
        return -1
    out = <char*>(g.p + g.n)
    if v6:
        out[0] = 91  # '['
        if inet_ntop(AF_INET6, ip, out + 1, 64) == NULL:
            return -1
        o = 1
        while out[o]:
            o += 1
        out[o] = 93  # ']'
        o += 1
    else:
        for k in range(4):
            o += _put_uint(out + o, ip[k])
            if k < 3:
                out[o] = 46  # '.'
                o += 1
    out[o] = 58  # ':'
    o += 1
    if port < 0:
        out[o] = 45  # '-'
        o += 1
        o += _put_uint(out + o, <uint32_t>(-<int64_t>port))
    else:
        o += _put_uint(out + o, <uint32_t>port)
    g.n += o
    return 0


cdef struct HostCache:
    uint8_t ip[16]
    int32_t port
    bint v6
    int64_t start, length    # the cached text inside the column's GBuf; length -1: none


DEF HOST_SLOTS = 16  # a power of two: hosts cached per column (each producer is one born host)


cdef inline int _host_column(GBuf* g, HostCache* cache, const uint8_t* ip, int width, int32_t port) noexcept nogil:
    # Hosts repeat from record to record (a few producers, one broker): ``cache`` holds
    # HOST_SLOTS texts already written to the column, one slot per host by a hash of its last
    # address bytes and port; a host found there is copied, another written and cached.
    cdef bint v6 = width == RMQ_IPV6_WIDTH
    cdef int64_t start = g.n
    cdef uint32_t x = (<uint32_t>port * 0x9E3779B1U) ^ (<uint32_t>ip[width - 1] * 0x85EBCA77U) \
        ^ (<uint32_t>ip[width - 2] * 0xC2B2AE3DU)
    cdef HostCache* c = &cache[(x >> 16) & (HOST_SLOTS - 1)]
    if c.length >= 0 and c.port == port and c.v6 == v6 and memcmp(c.ip, ip, width) == 0:
        if _reserve(g, c.length) < 0:
            return -1
        memcpy(g.p + g.n, g.p + c.start, c.length)
        g.n += c.length
        return 0
    if _put_host(g, ip, v6, port) < 0:
        return -1
    memcpy(c.ip, ip, width)
    c.port = port
    c.v6 = v6
    c.start = start
    c.length = g.n - start
    return 0



cdef struct Entry:
    int64_t kstart, klen, vsrc, vlen
    uint64_t head     # the key's first 8 bytes (zero-padded): most unequal keys differ here


cdef inline uint64_t _head_in_room(const uint8_t* s, int64_t n) noexcept nogil:
    # _head of ``n`` bytes at ``s`` where 8 bytes can be read
    cdef uint64_t w = rmq_load_le64(s)
    return w if n >= 8 else w & ((<uint64_t>1 << (8 * n)) - 1)


cdef void _tags_keys(const uint8_t* b, int64_t p, int64_t end, int64_t* tv, int64_t* tl,
                     int64_t* kv, int64_t* kl) noexcept nogil:
    # The raw value spans of the TAGS and KEYS entries (the later of repeated ones), or -1:
    # what _props finds without copying a key (a key that is not plain ASCII cannot
    # become "TAGS" or "KEYS" by replacement, so the raw bytes decide).
    cdef int64_t seg, sep
    cdef const uint8_t* hit
    tv[0] = -1
    kv[0] = -1
    while p < end:
        seg = p
        hit = <const uint8_t*>memchr(b + p, RMQ_PROPERTY_SEP, end - p)
        p = (hit - b) if hit != NULL else end
        hit = <const uint8_t*>memchr(b + seg, RMQ_NAME_VALUE_SEP, p - seg)
        sep = (hit - b) if hit != NULL else -1
        if sep > seg and p > sep + 1:
            if sep - seg == TAGS_LEN and memcmp(b + seg, TAGS_NAME, TAGS_LEN) == 0:
                tv[0] = sep + 1
                tl[0] = p - sep - 1
            elif sep - seg == KEYS_LEN and memcmp(b + seg, KEYS_NAME, KEYS_LEN) == 0:
                kv[0] = sep + 1
                kl[0] = p - sep - 1
        p += 1


cdef inline int64_t _next_low(const uint8_t* b, int64_t p, int64_t end) noexcept nogil:
    # A position at or after ``p`` where the caller must look, else ``end``: the first byte
    # below SEP_BOUND's byte (a separator, or a control byte the caller passes over) is never
    # passed. In non-ASCII text it may stop earlier, at a byte >= 0x80 the caller passes over
    # too. A borrow can flag a byte after a hit, never one before it, so the lowest flag is a
    # low byte or a high one.
    cdef uint64_t w, m
    while p + 8 <= end:
        w = rmq_load_le64(b + p)  # (the lowest flag is then the first byte)
        m = (w - SEP_BOUND) & 0x8080808080808080ULL
        if m:
            return p + (rmq_ctz64(m) >> 3)
        p += 8
    while p < end and b[p] >= <uint8_t>SEP_BOUND:
        p += 1
    return p


cdef inline int64_t _entry_end(const uint8_t* b, int64_t p, int64_t end, int64_t* sep) noexcept nogil:
    # The end of the properties entry at ``p`` (its PROPERTY_SEP, or ``end``), and in ``sep``
    # its first NAME_VALUE_SEP (-1: none): one SWAR pass finds both.
    sep[0] = -1
    while True:
        p = _next_low(b, p, end)
        if p == end or b[p] == RMQ_PROPERTY_SEP:
            return p
        if sep[0] < 0 and b[p] == RMQ_NAME_VALUE_SEP:
            sep[0] = p
        p += 1


cdef inline uint64_t _key_bit(uint64_t head, int64_t klen) noexcept nogil:
    # a key's bit of the 64 _props marks for the keys of a record (equal keys, equal bits)
    return (<uint64_t>1) << (((head ^ <uint64_t>klen) * 0x9E3779B97F4A7C15ULL) >> 58)


assert TAGS_LEN <= 8 and KEYS_LEN <= 8, "_props compares these names by their head"
cdef uint64_t TAGS_HEAD = _head(<const uint8_t*>TAGS_NAME, TAGS_LEN)
cdef uint64_t KEYS_HEAD = _head(<const uint8_t*>KEYS_NAME, KEYS_LEN)


cdef int _props(const uint8_t* b, int64_t p, int64_t end, GBuf* keys, GBuf* koff, GBuf* scratch,
                int64_t* tags_e, int64_t* keys_e, bint* all_ascii) noexcept nogil:
    # Split one record's properties text (separators from cq/format.py) into entries,
    # appending each key (UTF-8 replaced) to ``keys`` and its offset to ``koff``; a
    # repeated key (equal after replacement, as dict keys are) keeps its first place
    # and takes the later value. ``scratch`` gets the record's entries; ``all_ascii``
    # says whether the whole text is ASCII (its values then need no UTF-8 check).
    cdef int64_t seg, sep, kstart, klen, m, ne = 0
    cdef uint64_t head, bit, seen = 0
    cdef Entry* ents
    cdef Entry* e
    cdef bint ascii = _ascii_prefix(b + p, end - p) == end - p
    all_ascii[0] = ascii
    scratch.n = 0
    tags_e[0] = -1
    keys_e[0] = -1
    # room for every key of the record, replaced (3 bytes a byte at worst), and for its entries
    if _reserve(keys, 3 * (end - p)) < 0 or _reserve(koff, 4 * (end - p)) < 0 or \
            _reserve(scratch, <int64_t>sizeof(Entry) * (end - p)) < 0:
        return -1
    while p < end:
        seg = p
        p = _entry_end(b, p, end, &sep)
        if sep > seg and p > sep + 1:
            kstart = keys.n
            if ascii:
                _copy(keys.p + kstart, b + seg, sep - seg)
                keys.n += sep - seg
            else:
                keys.n += _utf8_into(keys.p + kstart, b + seg, sep - seg)  # room reserved above
            klen = keys.n - kstart
            # (from the text when the key is its bytes: a load from the bytes just copied
            # would wait for the copy's stores)
            head = _head_in_room(b + seg, klen) if ascii and seg + 8 <= end else _head(keys.p + kstart, klen)
            ents = <Entry*>scratch.p
            # one bit per key head seen in this record: a clear bit means no earlier key can be equal
            bit = _key_bit(head, klen)
            m = ne if (seen & bit) == 0 else 0
            seen |= bit
            while m < ne:
                if ents[m].head == head and ents[m].klen == klen and (
                        klen <= 8 or memcmp(keys.p + ents[m].kstart, keys.p + kstart, klen) == 0):
                    keys.n = kstart  # a repeated key: its first entry takes the value
                    ents[m].vsrc = sep + 1
                    ents[m].vlen = p - sep - 1
                    break
                m += 1
            if m == ne:
                (<int32_t*>(koff.p + koff.n))[0] = <int32_t>kstart
                koff.n += 4
                e = <Entry*>(scratch.p + scratch.n)
                e.kstart = kstart
                e.klen = klen
                e.head = head
                e.vsrc = sep + 1
                e.vlen = p - sep - 1
                scratch.n += sizeof(Entry)
                if klen == TAGS_LEN and head == TAGS_HEAD:  # (both names are under 8 bytes)
                    tags_e[0] = ne
                elif klen == KEYS_LEN and head == KEYS_HEAD:
                    keys_e[0] = ne
                ne += 1
        p += 1
    return <int>ne


cdef int _props_direct(const uint8_t* b, int64_t p, int64_t end, GBuf* keys, GBuf* koff, GBuf* vals,
                       GBuf* voff, int64_t* tv, int64_t* tl, int64_t* kv, int64_t* kl,
                       bint* all_ascii) noexcept nogil:
    # _props and the copy of its values in one pass, for the common record whose keys are all
    # distinct: each entry's key and value go straight to the map's buffers (UTF-8 replaced
    # unless the whole text is ASCII), and the raw spans of the TAGS and KEYS values to tv/tl,
    # kv/kl (-1: none). Returns the entries, -1 out of memory, or -2 at a repeated key: the
    # caller then drops what this wrote for the record and takes _props' way. ``all_ascii``
    # as _props gives it. (The buffers' ends are kept in locals: a byte store may alias any
    # GBuf field, which would make the compiler reload each after every copy.)
    cdef int64_t seg, sep, klen, vlen, m, ne = 0
    cdef uint64_t head, bit, seen = 0
    cdef bint ascii = _ascii_prefix(b + p, end - p) == end - p
    cdef uint8_t* kp
    cdef uint8_t* vp
    cdef int32_t* ko
    cdef int32_t* vo
    cdef int64_t kn, vn
    all_ascii[0] = ascii
    tv[0] = -1
    kv[0] = -1
    # room for every key and value of the record, replaced (3 bytes a byte at worst), and offsets
    if _reserve(keys, 3 * (end - p)) < 0 or _reserve(koff, 4 * (end - p)) < 0 or \
            _reserve(vals, 3 * (end - p)) < 0 or _reserve(voff, 4 * (end - p)) < 0:
        return -1
    kp = keys.p
    kn = keys.n
    vp = vals.p
    vn = vals.n
    ko = <int32_t*>(koff.p + koff.n)
    vo = <int32_t*>(voff.p + voff.n)
    while p < end:
        seg = p
        p = _entry_end(b, p, end, &sep)
        if sep > seg and p > sep + 1:
            vlen = p - sep - 1
            if ascii:
                klen = sep - seg
                _copy(kp + kn, b + seg, klen)
                # (from the text: a load from the bytes just copied would wait for the stores)
                head = _head_in_room(b + seg, klen) if seg + 8 <= end else _head(b + seg, klen)
            else:
                klen = _utf8_into(kp + kn, b + seg, sep - seg)
                head = _head(kp + kn, klen)
            # one bit per key head seen in this record: a clear bit means no earlier key can be equal
            bit = _key_bit(head, klen)
            if seen & bit:
                for m in range(ne):  # the earlier keys' spans, from their offsets
                    seg = ko[m - ne]
                    sep = ko[m + 1 - ne] if m + 1 < ne else kn
                    if sep - seg == klen and memcmp(kp + seg, kp + kn, klen) == 0:
                        return -2
            seen |= bit
            ko[0] = <int32_t>kn
            ko += 1
            kn += klen
            vo[0] = <int32_t>vn
            vo += 1
            if ascii:
                _copy(vp + vn, b + p - vlen, vlen)
                vn += vlen
            else:
                vn += _utf8_into(vp + vn, b + p - vlen, vlen)
            if klen == TAGS_LEN and head == TAGS_HEAD:  # (both names are under 8 bytes)
                tv[0] = p - vlen
                tl[0] = vlen
            elif klen == KEYS_LEN and head == KEYS_HEAD:
                kv[0] = p - vlen
                kl[0] = vlen
            ne += 1
        p += 1
    keys.n = kn
    vals.n = vn
    koff.n = <uint8_t*>ko - koff.p
    voff.n = <uint8_t*>vo - voff.p
    return <int>ne


cdef int _props_row(const uint8_t* b, int64_t p, int64_t end, GBuf* pkeys, GBuf* koff, GBuf* pvals,
                    GBuf* voff, GBuf* scratch, int64_t* tv, int64_t* tl, int64_t* kv, int64_t* kl,
                    bint* props_ascii) noexcept nogil:
    # One properties text's entries appended to the map's buffers (_props_direct, or _props' way
    # at a repeated key: its first place, its later value), the raw spans of its TAGS and KEYS
    # values to tv/tl, kv/kl (-1: none). Returns the entries, or -1 out of memory.
    cdef int64_t k0 = pkeys.n, ko0 = koff.n, v0 = pvals.n, vo0 = voff.n, tags_e, keys_e, j
    cdef Entry* ents
    cdef int ne = _props_direct(b, p, end, pkeys, koff, pvals, voff, tv, tl, kv, kl, props_ascii)
    if ne != -2:
        return ne
    pkeys.n, koff.n, pvals.n, voff.n = k0, ko0, v0, vo0
    ne = _props(b, p, end, pkeys, koff, scratch, &tags_e, &keys_e, props_ascii)
    if ne < 0:
        return -1
    ents = <Entry*>scratch.p
    if _reserve(pvals, 3 * (end - p)) < 0 or _reserve(voff, 4 * ne) < 0:
        return -1
    for j in range(ne):
        (<int32_t*>(voff.p + voff.n))[0] = <int32_t>pvals.n
        voff.n += 4
        if props_ascii[0]:
            _copy(pvals.p + pvals.n, b + ents[j].vsrc, ents[j].vlen)
            pvals.n += ents[j].vlen
        else:
            pvals.n += _utf8_into(pvals.p + pvals.n, b + ents[j].vsrc, ents[j].vlen)
    tv[0] = ents[tags_e].vsrc if tags_e >= 0 else -1
    tl[0] = ents[tags_e].vlen if tags_e >= 0 else 0
    kv[0] = ents[keys_e].vsrc if keys_e >= 0 else -1
    kl[0] = ents[keys_e].vlen if keys_e >= 0 else 0
    return ne


cdef inline int _put_value(GBuf* g, uint8_t* valid, int32_t* end_offset, const uint8_t* b, int64_t v, int64_t n,
                           bint plain) noexcept nogil:
    # A TAGS/KEYS value (raw span v, n; v < 0: absent) appended to its column: a plain copy when
    # ``plain`` (the text was found all ASCII), else UTF-8 replaced. 0, or -1 out of memory.
    if v >= 0:
        valid[0] = 1
        if (_put(g, b + v, n) if plain else _put_utf8(g, b + v, n)) < 0:
            return -1
    end_offset[0] = <int32_t>g.n
    return 0


cdef enum:
    F_STORE_SIZE, F_MAGIC, F_BODY_CRC, F_QUEUE_ID, F_FLAG, F_QUEUE_OFFSET, F_PHYS, F_SYS_FLAG
    F_BORN_TS, F_BORN_HOST, F_STORE_TS, F_STORE_HOST, F_RECONSUME, F_PREPARED, F_BODY, F_TOPIC
    F_PROPERTIES, F_TAGS, F_KEYS, N_FIELDS

assert [name for name, _ in fmt.RECORD_FIELDS] == [
    "store_size", "magic_code", "body_crc", "queue_id", "flag", "queue_offset", "commit_log_offset",
    "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "body", "topic", "properties", "tags", "keys"], "RECORD_FIELDS moved"

DEF INT32_MAX = 2147483647
# decode_columns' buffer slots beyond the fields' own: the map's key offsets, value offsets,
# key bytes and value bytes; _rates holds each slot's bytes per row in the last decode
cdef enum:
    SLOT_KOFF = N_FIELDS
    SLOT_VOFF
    SLOT_PKEYS
    SLOT_PVALS
    N_SLOTS
cdef double _rates[N_SLOTS]
memset(_rates, 0, sizeof(_rates))


cdef void _pool_take(GBuf* g, int slot, int64_t rows):
    # a pooled buffer for ``slot``, sized by the bytes per row it took last time
    _pool_get(g, <int64_t>(_rates[slot] * rows * 1.125))


cdef void _rate_note(GBuf* g, int slot, int64_t rows):
    if rows > 0 and g.n > 0:
        _rates[slot] = <double>g.n / rows
DEF PREFETCH_AHEAD = 8
DEF PREFETCH_BYTES = 512
DEF SIZING_ROWS = 256


def decode_columns(const uint8_t[::1] buf, const int64_t[::1] positions, int64_t limit, int64_t mask):
    """Decode the records at ``positions`` into the Arrow buffers of the fields in ``mask``.

    ``mask`` has bit ``1 << i`` for field ``i`` of ``cq.format.RECORD_FIELDS``.
    Returns ``(columns, error)``. ``columns`` maps each asked field to: an
    int32/int64 array (fixed fields); ``(offsets int32 (k + 1), data uint8,
    valid)`` for ``str``/``bin`` fields (``valid`` a uint8 0/1 array for
    ``tags``/``keys``, None otherwise; text is UTF-8 with each malformed
    subpart replaced by U+FFFD, as ``read_message`` decodes it); for
    ``properties``, ``(map_offsets int32 (k + 1), key_offsets int32 (e + 1),
    key_data, value_offsets int32 (e + 1), value_data)`` in ``read_message``'s
    dict order (first-seen key, later value wins). ``error`` is None or
    ``(index, reason, offset)`` of the first invalid record, as
    ``decode_records`` gives it (rows from it on are left zero). Raises
    OverflowError when a column passes 2 GiB (ask for fewer records).
    """
    cdef Py_ssize_t i, k = positions.shape[0]
    cdef int64_t n = buf.shape[0], pos, h, j, pf
    cdef Rec r
    cdef int code = 0, fail = 0, ne
    cdef Py_ssize_t bad = -1
    cdef int64_t tv = -1, tl = 0, kv = -1, kl = 0
    cdef bint want[N_FIELDS]
    cdef GBuf g[N_FIELDS]
    cdef GBuf koff, voff, scratch, pkeys, pvals
    cdef HostCache born_cache[HOST_SLOTS]
    cdef HostCache store_cache[HOST_SLOTS]
    cdef bint need_props, props_ascii = 0, ascii_values
    if limit < 0 or limit > n:
        raise ValueError(f"limit {limit} outside the buffer of {n} bytes")
    for j in range(N_FIELDS):
        want[j] = (mask >> j) & 1
    memset(g, 0, sizeof(g))
    memset(&koff, 0, sizeof(GBuf))
    memset(&voff, 0, sizeof(GBuf))
    memset(&scratch, 0, sizeof(GBuf))
    memset(&pkeys, 0, sizeof(GBuf))
    memset(&pvals, 0, sizeof(GBuf))
    for j in range(HOST_SLOTS):
        born_cache[j].length = -1
        store_cache[j].length = -1
    need_props = want[F_PROPERTIES] or want[F_TAGS] or want[F_KEYS]
    for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS):
        if want[j]:
            _pool_take(&g[j], j, k)
    if want[F_PROPERTIES]:
        _pool_take(&koff, SLOT_KOFF, k)
        _pool_take(&voff, SLOT_VOFF, k)
        _pool_take(&pkeys, SLOT_PKEYS, k)
        _pool_take(&pvals, SLOT_PVALS, k)
    cols = {}
    ints = {}
    for j, (name, kind) in enumerate(fmt.RECORD_FIELDS):
        if want[j] and kind in ("i4", "i8"):
            ints[j] = cols[name] = _pooled_zeros(k, kind)
    var_offsets = {}
    for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS, F_PROPERTIES):
        if want[j]:
            var_offsets[j] = _pooled_zeros(k + 1, np.int32)
    valid_tags = np.zeros(k if want[F_TAGS] else 0, dtype=np.uint8)
    valid_keys = np.zeros(k if want[F_KEYS] else 0, dtype=np.uint8)
    cdef int32_t[::1] o_born = var_offsets.get(F_BORN_HOST, np.zeros(1, np.int32))
    cdef int32_t[::1] o_store = var_offsets.get(F_STORE_HOST, np.zeros(1, np.int32))
    cdef int32_t[::1] o_body = var_offsets.get(F_BODY, np.zeros(1, np.int32))
    cdef int32_t[::1] o_topic = var_offsets.get(F_TOPIC, np.zeros(1, np.int32))
    cdef int32_t[::1] o_tags = var_offsets.get(F_TAGS, np.zeros(1, np.int32))
    cdef int32_t[::1] o_keys = var_offsets.get(F_KEYS, np.zeros(1, np.int32))
    cdef int32_t[::1] o_map = var_offsets.get(F_PROPERTIES, np.zeros(1, np.int32))
    cdef uint8_t[::1] v_tags = valid_tags, v_keys = valid_keys
    cdef int32_t[::1] c_size = ints.get(F_STORE_SIZE, np.zeros(0, np.int32))
    cdef int32_t[::1] c_magic = ints.get(F_MAGIC, np.zeros(0, np.int32))
    cdef int32_t[::1] c_crc = ints.get(F_BODY_CRC, np.zeros(0, np.int32))
    cdef int32_t[::1] c_qid = ints.get(F_QUEUE_ID, np.zeros(0, np.int32))
    cdef int32_t[::1] c_flag = ints.get(F_FLAG, np.zeros(0, np.int32))
    cdef int64_t[::1] c_qoff = ints.get(F_QUEUE_OFFSET, np.zeros(0, np.int64))
    cdef int64_t[::1] c_phys = ints.get(F_PHYS, np.zeros(0, np.int64))
    cdef int32_t[::1] c_sysf = ints.get(F_SYS_FLAG, np.zeros(0, np.int32))
    cdef int64_t[::1] c_bts = ints.get(F_BORN_TS, np.zeros(0, np.int64))
    cdef int64_t[::1] c_sts = ints.get(F_STORE_TS, np.zeros(0, np.int64))
    cdef int32_t[::1] c_recon = ints.get(F_RECONSUME, np.zeros(0, np.int32))
    cdef int64_t[::1] c_prep = ints.get(F_PREPARED, np.zeros(0, np.int64))
    if k and n == 0:
        return cols, (0, f"record header needs 8 bytes, {limit - positions[0]} left in the file", positions[0])
    cdef const uint8_t* b = &buf[0] if n else NULL
    with nogil:
        for i in range(k):
            # records are scattered through the file (other topics and queues between them): ask
            # for the first line of a record well ahead, and a few records ahead, its size read
            # from that line, for every line of it (its properties text, read last, ends it)
            if i + 2 * PREFETCH_AHEAD < k:
                pf = positions[i + 2 * PREFETCH_AHEAD]
                if 0 <= pf < n:
                    rmq_prefetch(b + pf)
            if i + PREFETCH_AHEAD < k:
                pf = positions[i + PREFETCH_AHEAD]
                if 0 <= pf and pf + 4 <= n:
                    h = <int32_t>rmq_load_be32(b + pf + RMQ_REC_TOTAL)
                    if h > PREFETCH_BYTES:  # (a long record's head is what is read first)
                        h = PREFETCH_BYTES
                    if h > 64 and pf + h <= n:
                        j = (pf & ~(<int64_t>63)) + 64
                        while j < pf + h:
                            rmq_prefetch(b + j)
                            j += 64
            if i == SIZING_ROWS and k > 2 * SIZING_ROWS:
                # the first rows tell each buffer's bytes per row: reserve for all rows at once
                for j in range(N_FIELDS):
                    _reserve_rows(&g[j], i, k)
                _reserve_rows(&pkeys, i, k)
                _reserve_rows(&pvals, i, k)
                _reserve_rows(&koff, i, k)
                _reserve_rows(&voff, i, k)
            pos = positions[i]
            code = _parse(b, pos, limit, &r)
            if code:
                bad = i
                break
            if want[F_STORE_SIZE]:
                c_size[i] = r.total
            if want[F_MAGIC]:
                c_magic[i] = r.magic
            if want[F_BODY_CRC]:
                c_crc[i] = <int32_t>rmq_load_be32(b + pos + RMQ_REC_BODY_CRC)
            if want[F_QUEUE_ID]:
                c_qid[i] = <int32_t>rmq_load_be32(b + pos + RMQ_REC_QUEUE_ID)
            if want[F_FLAG]:
                c_flag[i] = <int32_t>rmq_load_be32(b + pos + RMQ_REC_FLAG)
            if want[F_QUEUE_OFFSET]:
                c_qoff[i] = <int64_t>rmq_load_be64(b + pos + RMQ_REC_QUEUE_OFFSET)
            if want[F_PHYS]:
                c_phys[i] = <int64_t>rmq_load_be64(b + pos + RMQ_REC_PHYS)
            if want[F_SYS_FLAG]:
                c_sysf[i] = r.sys_flag
            if want[F_BORN_TS]:
                c_bts[i] = <int64_t>rmq_load_be64(b + pos + RMQ_REC_BORN_TS)
            h = pos + RMQ_REC_BORN_HOST
            if want[F_BORN_HOST]:
                if _host_column(&g[F_BORN_HOST], born_cache, b + h, r.bw,
                                <int32_t>rmq_load_be32(b + h + r.bw)) < 0:
                    fail = 1
                    break
                o_born[i + 1] = <int32_t>g[F_BORN_HOST].n
            h += r.bw + RMQ_PORT_WIDTH
            if want[F_STORE_TS]:
                c_sts[i] = <int64_t>rmq_load_be64(b + h)
            h += RMQ_STORE_TS_WIDTH
            if want[F_STORE_HOST]:
                if _host_column(&g[F_STORE_HOST], store_cache, b + h, r.sw,
                                <int32_t>rmq_load_be32(b + h + r.sw)) < 0:
                    fail = 1
                    break
                o_store[i + 1] = <int32_t>g[F_STORE_HOST].n
            h += r.sw + RMQ_PORT_WIDTH
            if want[F_RECONSUME]:
                c_recon[i] = <int32_t>rmq_load_be32(b + h)
            if want[F_PREPARED]:
                c_prep[i] = <int64_t>rmq_load_be64(b + h + RMQ_REC_TAIL_PREPARED)
            if want[F_BODY]:
                if _put(&g[F_BODY], b + r.body, r.blen) < 0:
                    fail = 1
                    break
                o_body[i + 1] = <int32_t>g[F_BODY].n
            if want[F_TOPIC]:
                if _put_utf8(&g[F_TOPIC], b + r.topic, r.topic_len) < 0:
                    fail = 1
                    break
                o_topic[i + 1] = <int32_t>g[F_TOPIC].n
            if want[F_PROPERTIES]:
                ne = _props_row(b, r.props, r.props + r.plen, &pkeys, &koff, &pvals, &voff, &scratch,
                                &tv, &tl, &kv, &kl, &props_ascii)
                if ne < 0:
                    fail = 1
                    break
                o_map[i + 1] = o_map[i] + ne
            elif need_props:
                _tags_keys(b, r.props, r.props + r.plen, &tv, &tl, &kv, &kl)
            # values inside properties text already found all ASCII need no UTF-8 check: a plain copy
            ascii_values = want[F_PROPERTIES] and props_ascii
            if want[F_TAGS]:
                if _put_value(&g[F_TAGS], &v_tags[i], &o_tags[i + 1], b, tv, tl, ascii_values) < 0:
                    fail = 1
                    break
            if want[F_KEYS]:
                if _put_value(&g[F_KEYS], &v_keys[i], &o_keys[i + 1], b, kv, kl, ascii_values) < 0:
                    fail = 1
                    break
            # only the variable-length buffers grow (the fixed fields write numpy arrays)
            if (g[F_BORN_HOST].n > INT32_MAX or g[F_STORE_HOST].n > INT32_MAX or g[F_BODY].n > INT32_MAX
                    or g[F_TOPIC].n > INT32_MAX or g[F_TAGS].n > INT32_MAX or g[F_KEYS].n > INT32_MAX
                    or pkeys.n > INT32_MAX or pvals.n > INT32_MAX):
                fail = 2
                break
    try:
        if fail == 1:
            raise MemoryError()
        if fail == 2:
            raise OverflowError(f"a column of {k} records passes 2 GiB: decode fewer records at a time")
        if bad < 0:
            for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC, F_TAGS, F_KEYS):
                _rate_note(&g[j], j, k)
            _rate_note(&koff, SLOT_KOFF, k)
            _rate_note(&voff, SLOT_VOFF, k)
            _rate_note(&pkeys, SLOT_PKEYS, k)
            _rate_note(&pvals, SLOT_PVALS, k)
        names = [name for name, _ in fmt.RECORD_FIELDS]
        for j in (F_BORN_HOST, F_STORE_HOST, F_BODY, F_TOPIC):
            if want[j]:
                cols[names[j]] = (var_offsets[j], _take(&g[j], np.uint8, g[j].n), None)
        if want[F_TAGS]:
            cols["tags"] = (var_offsets[F_TAGS], _take(&g[F_TAGS], np.uint8, g[F_TAGS].n), valid_tags)
        if want[F_KEYS]:
            cols["keys"] = (var_offsets[F_KEYS], _take(&g[F_KEYS], np.uint8, g[F_KEYS].n), valid_keys)
        if want[F_PROPERTIES]:
            if _put_i32(&koff, <int32_t>pkeys.n) < 0 or _put_i32(&voff, <int32_t>pvals.n) < 0:
                raise MemoryError()
            cols["properties"] = (var_offsets[F_PROPERTIES], _take(&koff, np.int32, koff.n // 4),
                                  _take(&pkeys, np.uint8, pkeys.n), _take(&voff, np.int32, voff.n // 4),
                                  _take(&pvals, np.uint8, pvals.n))
    finally:
        for j in range(N_FIELDS):
            _pool_put(g[j].p, g[j].cap)
        _pool_put(koff.p, koff.cap)
        _pool_put(voff.p, voff.cap)
        free(scratch.p)
        _pool_put(pkeys.p, pkeys.cap)
        _pool_put(pvals.p, pvals.cap)
    if bad >= 0:
        for arr in var_offsets.values():  # offsets stay monotonic: the rows from ``bad`` on are empty
            arr[bad + 1:] = arr[bad]
        return cols, (bad, _parse_error(code, &r, positions[bad], limit), r.at)
    return cols, None


def properties_columns(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths,
                       int64_t mask):
    """``decode_columns``' ``properties``, ``tags`` and ``keys`` columns (those of them in ``mask``)
    of properties texts that are not in a record: text ``i`` is ``buf[starts[i]:starts[i] + lengths[i]]``
    (an inner-batch message's, docs/formats.md#inner-batch). Same layout and parse as the decoder's;
    spans outside ``buf`` raise ValueError, a column past 2 GiB OverflowError.
    """
    cdef Py_ssize_t i, k = starts.shape[0]
    cdef int64_t n = buf.shape[0], p, end, tv = -1, tl = 0, kv = -1, kl = 0
    cdef int ne, fail = 0
    cdef bint want_props = (mask >> F_PROPERTIES) & 1, want_tags = (mask >> F_TAGS) & 1
    cdef bint want_keys = (mask >> F_KEYS) & 1, props_ascii = 0
    cdef GBuf gt, gk, koff, voff, scratch, pkeys, pvals
    if lengths.shape[0] != k:
        raise ValueError(f"{k} starts need {k} lengths, got {lengths.shape[0]}")
    for i in range(k):
        if starts[i] < 0 or lengths[i] < 0 or starts[i] + lengths[i] > n:
            raise ValueError(f"properties span {i} ({starts[i]}, {lengths[i]}) outside the buffer of {n} bytes")
    memset(&gt, 0, sizeof(GBuf))
    memset(&gk, 0, sizeof(GBuf))
    memset(&koff, 0, sizeof(GBuf))
    memset(&voff, 0, sizeof(GBuf))
    memset(&scratch, 0, sizeof(GBuf))
    memset(&pkeys, 0, sizeof(GBuf))
    memset(&pvals, 0, sizeof(GBuf))
    o_map_a = np.zeros(k + 1, dtype=np.int32)
    o_tags_a = np.zeros(k + 1, dtype=np.int32)
    o_keys_a = np.zeros(k + 1, dtype=np.int32)
    valid_tags = np.zeros(k, dtype=np.uint8)
    valid_keys = np.zeros(k, dtype=np.uint8)
    cdef int32_t[::1] o_map = o_map_a, o_tags = o_tags_a, o_keys = o_keys_a
    cdef uint8_t[::1] v_tags = valid_tags, v_keys = valid_keys
    cdef const uint8_t* b = &buf[0] if n else NULL
    try:
        with nogil:
            for i in range(k):
                p = starts[i]
                end = p + lengths[i]
                if want_props:
                    ne = _props_row(b, p, end, &pkeys, &koff, &pvals, &voff, &scratch, &tv, &tl, &kv, &kl,
                                    &props_ascii)
                    if ne < 0:
                        fail = 1
                        break
                    o_map[i + 1] = o_map[i] + ne
                else:
                    _tags_keys(b, p, end, &tv, &tl, &kv, &kl)
                if want_tags and _put_value(&gt, &v_tags[i], &o_tags[i + 1], b, tv, tl, want_props and props_ascii) < 0:
                    fail = 1
                    break
                if want_keys and _put_value(&gk, &v_keys[i], &o_keys[i + 1], b, kv, kl, want_props and props_ascii) < 0:
                    fail = 1
                    break
                if gt.n > INT32_MAX or gk.n > INT32_MAX or pkeys.n > INT32_MAX or pvals.n > INT32_MAX:
                    fail = 2
                    break
        if fail == 1:
            raise MemoryError()
        if fail == 2:
            raise OverflowError(f"a column of {k} properties texts passes 2 GiB: split fewer at a time")
        cols = {}
        if want_tags:
            cols["tags"] = (o_tags_a, _take(&gt, np.uint8, gt.n), valid_tags)
        if want_keys:
            cols["keys"] = (o_keys_a, _take(&gk, np.uint8, gk.n), valid_keys)
        if want_props:
            if _put_i32(&koff, <int32_t>pkeys.n) < 0 or _put_i32(&voff, <int32_t>pvals.n) < 0:
                raise MemoryError()
            cols["properties"] = (o_map_a, _take(&koff, np.int32, koff.n // 4), _take(&pkeys, np.uint8, pkeys.n),
                                  _take(&voff, np.int32, voff.n // 4), _take(&pvals, np.uint8, pvals.n))
        return cols
    finally:
        _pool_put(gt.p, gt.cap)
        _pool_put(gk.p, gk.cap)
        _pool_put(koff.p, koff.cap)
        _pool_put(voff.p, voff.cap)
        _pool_put(pkeys.p, pkeys.cap)
        _pool_put(pvals.p, pvals.cap)
        free(scratch.p)


def copy_records(const int32_t[::1] fds, const int64_t[::1] positions, const int64_t[::1] sizes,
                 int64_t file_size):
    """Copy record ``i`` from open CommitLog file ``fds[i]`` at ``positions[i]``, ``sizes[i]`` bytes, back to back.

    What ``decode_columns`` needs to decode the records out of the copy
    instead of the mapped files (docs/data-path.md#consume): ``(data,
    starts)``, a uint8 array of the records and each one's start in it. None
    when a record does not lie inside ``file_size``, a read comes short, or a
    copied record's TOTALSIZE is not its size: the caller then reads the
    mapped files, where the decoder names what is wrong. Records that follow
    each other in one file are read in one call.
    """
    cdef Py_ssize_t i, j, k = positions.shape[0]
    cdef int64_t total = 0, got, want
    cdef int ok = 1
    cdef GBuf g
    if sizes.shape[0] != k or fds.shape[0] != k:
        raise ValueError(f"{k} positions need {k} sizes and file descriptors, got {sizes.shape[0]} "
                         f"and {fds.shape[0]}")
    for i in range(k):
        if positions[i] < 0 or sizes[i] < RMQ_REC_HEAD or sizes[i] > file_size - positions[i]:
            return None
        total += sizes[i]
    starts = np.empty(k, dtype=np.int64)
    cdef int64_t[::1] st = starts
    memset(&g, 0, sizeof(GBuf))
    _pool_get(&g, total)
    if g.cap < total:
        _pool_put(g.p, g.cap)
        g.p = <uint8_t*>malloc(total if total else 1)
        if g.p == NULL:
            raise MemoryError()
        g.cap = total
    with nogil:
        i = 0
        while i < k and ok:
            j = i + 1  # a run of records that follow each other in one file: one read
            want = sizes[i]
            while j < k and fds[j] == fds[i] and positions[j] == positions[j - 1] + sizes[j - 1]:
                want += sizes[j]
                j += 1
            got = pread(fds[i], g.p + g.n, want, positions[i])
            if got != want:
                ok = 0
                break
            while i < j:
                st[i] = g.n
                if <int64_t>rmq_load_be32(g.p + g.n + RMQ_REC_TOTAL) != sizes[i]:
                    ok = 0
                    break
                g.n += sizes[i]
                i += 1
    if not ok:
        _pool_put(g.p, g.cap)
        return None
    return _take(&g, np.uint8, g.n), starts


