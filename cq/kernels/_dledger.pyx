"""The DLedger CommitLog walk, without the GIL (twin: ``_dledger_py.py``).

Entries are stepped over by their headers and each NORMAL entry's record validated with the
record walk's own parser (``_record.pxd``). Entry layout and recovery rules:
docs/formats.md#dledger-entry, docs/formats.md#dledger-recovery.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from ._bytes cimport rmq_load_be32, rmq_load_be64
from ._layout cimport (RMQ_DLEDGER_BLANK, RMQ_DLEDGER_BODY, RMQ_DLEDGER_BODY_LEN, RMQ_DLEDGER_INDEX,
                       RMQ_DLEDGER_MAGIC, RMQ_DLEDGER_MAGIC_CONFIG_CHANGE, RMQ_DLEDGER_MAGIC_NOOP,
                       RMQ_DLEDGER_MAGIC_NORMAL, RMQ_DLEDGER_MIN_BLANK, RMQ_DLEDGER_POS, RMQ_DLEDGER_SIZE,
                       RMQ_DLEDGER_TERM, RMQ_REC_BODY_CRC, RMQ_REC_MIN_SIZE)
from ._record cimport Rec, _crc32, _parse

# what is wrong with the entry where a walk stopped (the reasons are formatted after the loop)
cdef enum Problem:
    NONE, BLANK_SIZE, MAGIC, SIZE, BODY_LEN, POS, INDEX, TERM, EMPTY, RECORD, CRC


cdef Problem _problem(const uint8_t* b, int64_t file_start, int64_t pos, int64_t limit, int32_t magic,
                      int32_t size, int64_t last_index, int64_t last_term, bint check_crc) noexcept nogil:
    cdef int32_t body_len
    cdef Rec r
    cdef int64_t body = pos + RMQ_DLEDGER_BODY, end = pos + size
    if (magic != RMQ_DLEDGER_MAGIC_NORMAL and magic != RMQ_DLEDGER_MAGIC_NOOP
            and magic != RMQ_DLEDGER_MAGIC_CONFIG_CHANGE):
        return MAGIC
    if size < RMQ_DLEDGER_BODY or end > limit:
        return SIZE
    body_len = <int32_t>rmq_load_be32(b + pos + RMQ_DLEDGER_BODY_LEN)
    if <int64_t>body_len + RMQ_DLEDGER_BODY != size:
        return BODY_LEN
    if <int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_POS) != file_start + pos:
        return POS
    if last_index >= 0 and <int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_INDEX) != last_index + 1:
        return INDEX
    if <int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_TERM) < last_term:
        return TERM
    if magic != RMQ_DLEDGER_MAGIC_NORMAL:
        return NONE
    if body_len == 0:
        return EMPTY
    if _parse(b, body, end, &r) != 0 or r.total != end - body:
        return RECORD
    if check_crc and <int32_t>(_crc32(b + r.body, r.blen) & 0x7FFFFFFF) != \
            <int32_t>rmq_load_be32(b + body + RMQ_REC_BODY_CRC):
        return CRC
    return NONE


def dledger_scan(const uint8_t[::1] buf, int64_t file_start, int64_t pos, int64_t limit, bint check_crc,
                 int64_t max_records, int64_t last_index, int64_t last_term=-1):
    """Walk the DLedger entries of one file from ``pos`` (readable end ``limit``).

    Returns ``(record_positions int64, position, status, reason, last_index, last_term)``: the file
    positions of the records inside the valid entries passed (entry position + 48; only NORMAL
    entries hold one), where the walk stopped, and why: 0 end of data (unwritten space, or fewer
    than 8 bytes before ``limit``), 1 a blank filling the rest of the file, 2 an invalid entry at
    ``position`` (``reason`` says what, else None), 3 ``max_records`` found (-1: no bound).
    ``last_index`` is the DLedger index of the entry before ``pos`` (-1: none known) on the way
    in, of the last entry passed on the way out; ``last_term`` likewise its term (-1: none known),
    which an entry's term may not fall below. ``check_crc``: a record whose body CRC does not
    match is invalid too.
    """
    cdef int64_t n = buf.shape[0], found = 0, cap
    cdef int status = 0
    cdef int32_t magic = 0, size = 0
    cdef Problem problem = NONE
    if pos < 0 or limit < 0 or limit > n:
        raise ValueError(f"pos {pos} and limit {limit} must lie in the buffer of {n} bytes")
    # at most one record per smallest entry: the array is sized once (untouched pages cost nothing)
    cap = (limit - pos) // (RMQ_DLEDGER_BODY + RMQ_REC_MIN_SIZE) + 1 if limit > pos else 1
    if 0 <= max_records < cap:
        cap = max_records
    out = np.empty(cap, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef const uint8_t* b = &buf[0] if n else NULL
    with nogil:
        while True:
            if found == max_records:
                status = 3
                break
            if limit - pos < RMQ_DLEDGER_MIN_BLANK:
                status = 0
                break
            magic = <int32_t>rmq_load_be32(b + pos + RMQ_DLEDGER_MAGIC)
            size = <int32_t>rmq_load_be32(b + pos + RMQ_DLEDGER_SIZE)
            if magic == RMQ_DLEDGER_BLANK:
                if size >= RMQ_DLEDGER_MIN_BLANK and pos + size == n:
                    status = 1
                    break
                if size >= RMQ_DLEDGER_MIN_BLANK and pos + size <= limit:
                    pos += size  # a blank inside a file: DLedger's recovery steps over it
                    continue
                status, problem = 2, BLANK_SIZE
                break
            if size == 0 and magic == 0:
                status = 0
                break
            problem = _problem(b, file_start, pos, limit, magic, size, last_index, last_term, check_crc)
            if problem != NONE:
                status = 2
                break
            if magic == RMQ_DLEDGER_MAGIC_NORMAL:
                o[found] = pos + RMQ_DLEDGER_BODY
                found += 1
            last_index = <int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_INDEX)
            last_term = <int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_TERM)
            pos += size
    return out[:found].copy(), pos, status, _reason(problem, b, file_start, pos, limit, magic, size,
                                                    last_index, last_term), last_index, last_term


cdef object _reason(Problem problem, const uint8_t* b, int64_t file_start, int64_t pos, int64_t limit,
                    int32_t magic, int32_t size, int64_t last_index, int64_t last_term):
    # the twin's reason for each problem, word for word
    if problem == NONE:
        return None
    if problem == BLANK_SIZE:
        return f"DLedger blank of size {size} does not end inside the file"
    if problem == MAGIC:
        return f"unknown DLedger entry magic {magic}"
    if problem == SIZE:
        return f"DLedger entry size {size} does not fit (header {RMQ_DLEDGER_BODY} B, {limit - pos} B left in the file)"
    if problem == BODY_LEN:
        return f"DLedger entry size {size} != bodyLen {<int32_t>rmq_load_be32(b + pos + RMQ_DLEDGER_BODY_LEN)} + {RMQ_DLEDGER_BODY}"
    if problem == POS:
        return f"DLedger entry pos field {<int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_POS)} is not its offset {file_start + pos}"
    if problem == INDEX:
        return f"DLedger entry index {<int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_INDEX)} does not follow {last_index}"
    if problem == TERM:
        return f"DLedger entry term {<int64_t>rmq_load_be64(b + pos + RMQ_DLEDGER_TERM)} is below the term {last_term} of the entry before it"
    if problem == EMPTY:
        return "DLedger NORMAL entry without a body"
    if problem == RECORD:
        return "the DLedger entry's body is not one CommitLog record"
    return "the record in the DLedger entry fails its body CRC"
