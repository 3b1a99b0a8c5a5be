"""The broker's config files under ``{store}/config/``, read as the broker reads them.

The facts this module relies on are in ``docs/config-and-index.md``:

* The files are whole-file JSON texts written by Alibaba fastjson. Fastjson writes a map
  whose keys are not strings with **bare keys** (``{0:5280,1:5312}``); everything else is
  standard JSON (pretty or compact, UTF-8). :func:`parse_fastjson` accepts exactly that:
  standard JSON plus bare integer object keys, nothing more lenient.
* The broker persists a file by writing ``{file}.tmp``, keeping the old text as
  ``{file}.bak`` and renaming the temp file over ``{file}``. A reader reads ``{file}`` and,
  if it is missing, empty or does not parse, falls back to ``{file}.bak`` (the broker's
  ``ConfigManager.load``). :func:`load_config` does that and says which file it used.
* Unknown fields (fastjson also serialises getters, such as ``"dead"``) are ignored.
* Readers never write any of these files.

Errors in a file raise :class:`ConfigFormatError` (a :class:`cq.StoreFormatError`, hence
a ValueError) naming the file, the byte offset and the line:column; a field of the wrong
type is named by its JSON path.
"""
from __future__ import annotations

import json
import marshal
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import bloom

from .. import format as fmt
from ..errors import StoreFormatError
from ..tags import bloom_key

__all__ = [
    "CONFIG_DIR",
    "CONSUMER_FILTER_FILE",
    "CONSUMER_OFFSET_FILE",
    "DELAY_OFFSET_FILE",
    "LMQ_CONSUMER_OFFSET_FILE",
    "SUBSCRIPTION_GROUP_FILE",
    "TOPICS_FILE",
    "ConfigFile",
    "ConfigFormatError",
    "ConfigWarning",
    "RegisteredFilter",
    "committed_from_table",
    "load_config",
    "parse_fastjson",
    "read_committed_offsets",
    "read_delay_offsets",
    "read_lmq_offset_table",
    "read_offset_table",
    "read_registered_filters",
    "read_subscription_groups",
    "read_topic_configs",
]

#: ``{storePathRootDir}/config``.
CONFIG_DIR = "config"
CONSUMER_FILTER_FILE = "consumerFilter.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
#: A broker with ``enableLmq`` keeps its whole offset table here instead (``LmqConsumerOffsetManager``):
#: ``offsetTable`` as in consumerOffset.json, and ``lmqOffsetTable`` ``{"{topic}@{group}": offset}``
#: for groups named ``%LMQ%...`` (docs/formats.md#lmq).
LMQ_CONSUMER_OFFSET_FILE = "lmqConsumerOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
TOPICS_FILE = "topics.json"
DELAY_OFFSET_FILE = "delayOffset.json"
#: Suffix of the previous version the broker keeps (``MixAll.string2File``).
BAK_SUFFIX = ".bak"
#: ``consumerOffset.json`` keys are ``"{topic}@{group}"``.
TOPIC_GROUP_SEPARATOR = "@"
#: On load the broker treats an entry with deadTime 0 as dead this long before "now".
DEAD_ON_LOAD_MS = 30_000


class ConfigFormatError(StoreFormatError):
    """A broker config file is not the JSON (fastjson dialect) or the layout the broker writes.

    Attributes
    ----------
    path : str
        The file.
    offset : int or None
        Byte offset of the problem in the file (None for a field of the wrong type).
    line, column : int or None
        1-based line and column (in characters) of the problem.
    field : str or None
        JSON path of a field of the wrong type, e.g. ``offsetTable.T@G.0``.
    """

    def __init__(self, message: str, path: str | os.PathLike, offset: int | None = None, *,
                 line: int | None = None, column: int | None = None, field: str | None = None) -> None:
        self.line = line
        self.column = column
        self.field = field
        where = f"line {line} column {column}: " if line is not None else ""
        if field is not None:
            where += f"field {field}: "
        super().__init__(where + message, path, offset)


class ConfigWarning(UserWarning):
    """Something in a config file the broker would react to (fallback to ``.bak``, bloom data mismatch)."""


# ------------------------------------------------------------------ the JSON dialect
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_BARE_KEY = re.compile(r"-?(?:0|[1-9][0-9]*)")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_STRING_CHUNK = re.compile(r'[^"\\\x00-\x1f]*')


class _Parser:
    """Recursive descent over the decoded text; positions are character indices."""

    __slots__ = ("path", "text")

    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.path = path

    def error(self, pos: int, message: str) -> ConfigFormatError:
        text = self.text
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        offset = len(text[:pos].encode("utf-8", "surrogatepass"))
        return ConfigFormatError(message, self.path, offset, line=line, column=column)

    def found(self, pos: int) -> str:
        return "end of file" if pos >= len(self.text) else repr(self.text[pos])

    def parse(self) -> Any:
        pos = _WS.match(self.text, 0).end()
        value, pos = self.value(pos, 0)
        pos = _WS.match(self.text, pos).end()
        if pos != len(self.text):
            raise self.error(pos, f"unexpected {self.found(pos)} after the JSON value")
        return value

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        text = self.text
        if depth > 512:
            raise self.error(pos, "nested too deeply")
        c = text[pos] if pos < len(text) else ""
        if c == "{":
            return self.obj(pos, depth)
        if c == "[":
            return self.array(pos, depth)
        if c == '"':
            return self.string(pos)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, pos):
                return val, pos + len(word)
        m = _NUMBER.match(text, pos)
        if m and m.end() > pos:
            if m.group(1) or m.group(2):
                return float(m.group()), m.end()
            return int(m.group()), m.end()
        raise self.error(pos, f"expected a JSON value, found {self.found(pos)}")

    def string(self, pos: int) -> tuple[str, int]:
        text = self.text
        out = []
        i = pos + 1
        while True:
            m = _STRING_CHUNK.match(text, i)
            out.append(m.group())
            i = m.end()
            if i >= len(text):
                raise self.error(pos, "unterminated string")
            c = text[i]
            if c == '"':
                return "".join(out), i + 1
            if c != "\\":
                raise self.error(i, f"control character {c!r} in a string")
            esc = text[i + 1:i + 2]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 2
            elif esc == "u":
                digits = text[i + 2:i + 6]
                if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise self.error(i, "invalid \\u escape")
                unit = int(digits, 16)
                i += 6
                # a surrogate pair written as two escapes is one character
                if 0xD800 <= unit < 0xDC00 and text.startswith("\\u", i):
                    low = text[i + 2:i + 6]
                    if len(low) == 4 and all(d in "0123456789abcdefABCDEF" for d in low) \
                            and 0xDC00 <= int(low, 16) < 0xE000:
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (int(low, 16) - 0xDC00)
                        i += 6
                out.append(chr(unit))
            else:
                raise self.error(i, f"invalid escape {text[i:i + 2]!r}")

    def key(self, pos: int) -> tuple[str | int, int]:
        if pos < len(self.text) and self.text[pos] == '"':
            return self.string(pos)
        # fastjson writes the keys of a map whose keys are not strings bare: {0:5,1:6}
        m = _BARE_KEY.match(self.text, pos)
        if m is None:
            raise self.error(pos, f"expected an object key (a string or an integer), found {self.found(pos)}")
        return int(m.group()), m.end()

    def obj(self, pos: int, depth: int) -> tuple[dict, int]:
        text = self.text
        out: dict = {}
        pos = _WS.match(text, pos + 1).end()
        if text.startswith("}", pos):
            return out, pos + 1
        while True:
            key, pos = self.key(pos)
            pos = _WS.match(text, pos).end()
            if not text.startswith(":", pos):
                raise self.error(pos, f"expected ':' after object key {key!r}, found {self.found(pos)}")
            pos = _WS.match(text, pos + 1).end()
            out[key], pos = self.value(pos, depth + 1)
            pos = _WS.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _WS.match(text, pos + 1).end()
            elif text.startswith("}", pos):
                return out, pos + 1
            else:
                raise self.error(pos, f"expected ',' or '}}' in an object, found {self.found(pos)}")

    def array(self, pos: int, depth: int) -> tuple[list, int]:
        text = self.text
        out: list = []
        pos = _WS.match(text, pos + 1).end()
        if text.startswith("]", pos):
            return out, pos + 1
        while True:
            item, pos = self.value(pos, depth + 1)
            out.append(item)
            pos = _WS.match(text, pos).end()
            if text.startswith(",", pos):
                pos = _WS.match(text, pos + 1).end()
            elif text.startswith("]", pos):
                return out, pos + 1
            else:
                raise self.error(pos, f"expected ',' or ']' in an array, found {self.found(pos)}")


def parse_fastjson(data: bytes | str, path: str | os.PathLike = "<json>") -> Any:
    """Parse a config file's text: standard JSON plus fastjson's bare integer object keys.

    Parameters
    ----------
    data : bytes or str
        The file's content (bytes are decoded as UTF-8).
    path : str or os.PathLike
        The file, for error messages.

    Returns
    -------
    object
        dicts (bare keys become ``int`` keys), lists, str, int, float, bool, None.

    Raises
    ------
    ConfigFormatError
        The text is not UTF-8 or not JSON in that dialect; the message names the file,
        the byte offset and the line:column.

    Examples
    --------
    >>> parse_fastjson('{"offsetTable":{"T@G":{0:5,1:7}}}')
    {'offsetTable': {'T@G': {0: 5, 1: 7}}}
    """
    path = os.fspath(path)
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = raw[:exc.start].decode("utf-8", "replace")
            line = before.count("\n") + 1
            column = len(before) - (before.rfind("\n") + 1) + 1
            raise ConfigFormatError("not UTF-8 text", path, exc.start, line=line, column=column) from exc
    else:
        text = data
    if not text.strip():
        raise ConfigFormatError("empty file", path, 0, line=1, column=1)
    fast = _parse_fast(text)
    if fast is not _NOT_PARSED:
        return fast
    return _Parser(text, path).parse()  # the exact reader; it also says where the text goes wrong


#: Outside strings, a bare integer key right after "{" or ",": the only place fastjson writes one.
_BARE_KEY_OUTSIDE_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|(?<=[{,])([ \t\n\r]*)(-?(?:0|[1-9][0-9]*))(?=[ \t\n\r]*:)')
#: Marks a key that was bare while the text goes through the json module.
_BARE_MARK = "\x00"
_NOT_PARSED = object()


def _mark_bare_key(m: re.Match) -> str:
    # the JSON escape of the marker: the text stays valid JSON (raw control characters are not)
    return m.group(0) if m.group(2) is None else f'{m.group(1)}"\\u0000{m.group(2)}"'


def _unmark(pairs: list) -> dict:
    return {(int(k[1:]) if k[:1] == _BARE_MARK else k): v for k, v in pairs}


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _parse_fast(text: str) -> Any:
    """The same result as :class:`_Parser` through the C json module (quote the bare keys, parse,
    unquote), for big files; ``_NOT_PARSED`` when the text needs the exact reader (an error to
    locate, or a ``\\u0000`` escape that could pass for the marker)."""
    if "\\u0000" in text:
        return _NOT_PARSED
    try:
        return json.loads(_BARE_KEY_OUTSIDE_STRINGS.sub(_mark_bare_key, text), object_pairs_hook=_unmark,
                          parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return _NOT_PARSED


# ------------------------------------------------------------------ loading with the .bak fallback
@dataclass(frozen=True)
class ConfigFile:
    """One config file as loaded: which file was read, and its parsed content.

    Attributes
    ----------
    path : str
        The file asked for (``{store}/config/{name}``).
    source : str or None
        The file actually read: ``path``, ``path + ".bak"``, or None when neither exists
        (or both are empty): the broker then starts with an empty table.
    data : object
        The parsed (and, for the readers below, extracted) content; None without a source.
    fallback_reason : str or None
        Why ``path`` was not used when ``source`` is the ``.bak`` file.
    """

    path: str
    source: str | None
    data: Any
    fallback_reason: str | None = None


T = TypeVar("T")


#: Config files parsed lately: (path, device, inode, size, mtime) -> the parse, marshalled. A broker
#: rewrites a config file by writing a new one and renaming it into place (docs/config-and-index.md),
#: so a file whose identity and stamp are those of a parse is that parse's text; ``why`` over many
#: messages reads the same few files thousands of times. Each hit is a fresh copy (marshal: C speed).
_PARSES: OrderedDict[tuple, bytes] = OrderedDict()
_PARSES_MAX = 32
_PARSES_LOCK = threading.Lock()


def _read_parsed(path: str) -> tuple[bool, Any]:
    """``(False, None)`` for a missing or empty file, else ``(True, parse_fastjson(its bytes))``,
    the parse reused while the open file's inode, size and mtime are those it was parsed at."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with _PARSES_LOCK:
                kept = _PARSES.get(key)
                if kept is not None:
                    _PARSES.move_to_end(key)
            if kept is not None:
                return True, marshal.loads(kept)
            raw = f.read()
    except FileNotFoundError:
        return False, None
    except IsADirectoryError as exc:
        raise ConfigFormatError("is a directory, not a config file", path) from exc
    except OSError as exc:  # permissions and the like: an error naming the file, like a bad one
        raise ConfigFormatError(f"cannot be read ({exc.strerror or exc})", path) from exc
    if len(raw) == 0:
        return False, None
    parsed = parse_fastjson(raw, path)
    if len(raw) == st.st_size:   # read whole as stamped: a file growing under the read is not kept
        with _PARSES_LOCK:
            _PARSES[key] = marshal.dumps(parsed)
            while len(_PARSES) > _PARSES_MAX:
                _PARSES.popitem(last=False)
    return True, parsed


def load_config(path: str | os.PathLike, extract: Callable[[Any, str], T] | None = None) -> ConfigFile:
    """Load a config file the way ``ConfigManager.load`` does, with the ``.bak`` fallback.

    ``{path}`` is read; when it is missing, empty, or does not parse (or ``extract`` rejects
    it), ``{path}.bak`` is read instead and a :class:`ConfigWarning` says so (unless the file
    was simply missing). When neither gives content, the result has ``source=None``; when
    ``{path}`` is malformed and the ``.bak`` cannot stand in for it, ``{path}``'s error is
    raised.

    Parameters
    ----------
    path : str or os.PathLike
        The config file.
    extract : callable(parsed, source_path) -> object, optional
        Turns the parsed JSON into the result (raising :class:`ConfigFormatError` when the
        layout is wrong, which also triggers the fallback, as a failing ``decode`` does).

    Returns
    -------
    ConfigFile
    """
    path = os.fspath(path)
    bak = path + BAK_SUFFIX

    def attempt(p: str) -> tuple[bool, Any]:
        ok, parsed = _read_parsed(p)
        if not ok:
            return False, None
        return True, (extract(parsed, p) if extract is not None else parsed)

    reason = None
    main_error: ConfigFormatError | None = None
    try:
        ok, data = attempt(path)
        if ok:
            return ConfigFile(path, path, data)
        reason = "missing" if not os.path.exists(path) else "empty"
    except ConfigFormatError as exc:
        main_error = exc
        reason = f"unreadable ({exc})"
    try:
        ok, data = attempt(bak)
    except ConfigFormatError as exc:
        if main_error is not None:
            raise main_error from exc
        raise
    if not ok:
        if main_error is not None:
            raise main_error
        return ConfigFile(path, None, None, reason)
    if reason != "missing":
        warnings.warn(f"{path} is {reason}: read {bak} instead, as the broker does", ConfigWarning, stacklevel=3)
    return ConfigFile(path, bak, data, reason)


# ------------------------------------------------------------------ layout helpers
def _field(obj: dict, name: str, kind: type | tuple, where: str, src: str, default: Any = None) -> Any:
    value = obj.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and kind is not bool:
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if bool not in kinds:
            raise ConfigFormatError(f"expected {_kind_name(kind)}, found {value!r}", src, field=f"{where}.{name}")
    if not isinstance(value, kind):
        raise ConfigFormatError(f"expected {_kind_name(kind)}, found {_json_type(value)}", src,
                                field=f"{where}.{name}")
    return value


def _kind_name(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "an object", list: "an array", str: "a string", int: "an integer", bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return f"the string {value!r}"
    return repr(value)


def _table(parsed: Any, name: str, src: str) -> dict:
    if not isinstance(parsed, dict):
        raise ConfigFormatError(f"expected a JSON object at the top, found {_json_type(parsed)}", src)
    table = _field(parsed, name, dict, "$", src, {})
    return table


# ------------------------------------------------------------------ consumerFilter.json
@dataclass(frozen=True)
class RegisteredFilter:
    """One SQL92 filter registration of ``consumerFilter.json`` (``ConsumerFilterData``).

    Attributes
    ----------
    group, topic : str
        ``consumerGroup`` and ``topic``.
    expression : str or None
        The SQL92 text.
    expression_type : str or None
        ``"SQL92"`` in practice.
    born_time : int
        ms when this version of the filter was built: ext bitmaps carry the group's bits only
        for messages stored strictly after it (``isMsgInLive``).
    dead_time : int
        0 while alive, else ms when it died.
    bloom_data : bloom.BloomFilterData or None
        The persisted ``bloomFilterData`` (k bit positions of ``"{group}#{topic}"`` and m).
    client_version : int
        The subscription's version (ms).
    bloom_matches : bool
        Whether ``bloom_data`` equals what the store's Bloom filter computes for
        ``"{group}#{topic}"`` (the broker discards the whole file on load when persisted
        bloom data is not valid for its filter).

    The filter the broker pulls with for it is built by :func:`cq.filter.subscription.registration_filter`.
    """

    group: str
    topic: str
    expression: str | None
    expression_type: str | None
    born_time: int
    dead_time: int
    bloom_data: bloom.BloomFilterData | None
    client_version: int
    bloom_matches: bool

    @property
    def bloom_key(self) -> str:
        """``"{group}#{topic}"``."""
        return bloom_key(self.group, self.topic)

    @property
    def is_dead(self) -> bool:
        """``isDead``: ``deadTime >= bornTime``, from the fields as persisted.

        An entry persisted with ``deadTime == 0`` is alive here; a broker *loading* the file
        marks it dead at ``max(now - 30 s, bornTime)`` until its consumer registers again
        (:meth:`dead_time_on_load`). Dead or alive, the dispatcher still sets its bits and a
        pull by the group still uses it.
        """
        return self.dead_time >= self.born_time

    def dead_time_on_load(self, now_ms: int | None = None) -> int:
        """The deadTime a broker loading this entry at ``now_ms`` gives it."""
        if self.dead_time != 0:
            return self.dead_time
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return max(now - DEAD_ON_LOAD_MS, self.born_time)


def _registered_filters(parsed: Any, src: str, bloom_filter: Any) -> list[RegisteredFilter]:
    by_topic = _table(parsed, "filterDataByTopic", src)
    out = []
    for topic_key, entry in by_topic.items():
        where = f"filterDataByTopic.{topic_key}"
        if entry is None:
            continue
        if not isinstance(entry, dict):
            raise ConfigFormatError(f"expected an object, found {_json_type(entry)}", src, field=where)
        groups = _field(entry, "groupFilterData", dict, where, src, {})
        for group_key, data in groups.items():
            gwhere = f"{where}.groupFilterData.{group_key}"
            if data is None:
                continue
            if not isinstance(data, dict):
                raise ConfigFormatError(f"expected an object, found {_json_type(data)}", src, field=gwhere)
            group = _field(data, "consumerGroup", str, gwhere, src, str(group_key))
            topic = _field(data, "topic", str, gwhere, src, _field(entry, "topic", str, where, src, str(topic_key)))
            bloom_data = None
            raw_bloom = _field(data, "bloomFilterData", dict, gwhere, src)
            if raw_bloom is not None:
                bwhere = f"{gwhere}.bloomFilterData"
                bit_pos = _field(raw_bloom, "bitPos", list, bwhere, src, [])
                if not all(isinstance(p, int) and not isinstance(p, bool) for p in bit_pos):
                    raise ConfigFormatError("expected an array of integers", src, field=f"{bwhere}.bitPos")
                bloom_data = bloom.BloomFilterData(bit_pos, _field(raw_bloom, "bitNum", int, bwhere, src, 0))
            expected = bloom_filter.generate(bloom_key(group, topic))
            out.append(RegisteredFilter(
                group=group,
                topic=topic,
                expression=_field(data, "expression", str, gwhere, src),
                expression_type=_field(data, "expressionType", str, gwhere, src),
                born_time=_field(data, "bornTime", int, gwhere, src, 0),
                dead_time=_field(data, "deadTime", int, gwhere, src, 0),
                bloom_data=bloom_data,
                client_version=_field(data, "clientVersion", int, gwhere, src, 0),
                bloom_matches=bloom_data is not None and bloom_data == expected,
            ))
    return out


def read_registered_filters(path: str | os.PathLike, bloom_filter: Any = None,
                            topic: str | None = None) -> list[RegisteredFilter]:
    """Every registration in a ``consumerFilter.json`` (or its ``.bak``), in file order.

    Warns (:class:`ConfigWarning`, naming the group) for each entry whose bloom data is not
    what ``bloom_filter`` (default ``bloom.BloomFilter()``) computes for ``"{group}#{topic}"``;
    an entry without bloom data, as a 5.5.1+ broker with ``enableCalcFilterBitMap=false`` writes
    it, is read without one (docs/config-and-index.md#no-bloom-data). A missing file gives ``[]``.
    """
    bf = bloom.BloomFilter() if bloom_filter is None else bloom_filter
    loaded = load_config(path, lambda parsed, src: _registered_filters(parsed, src, bf))
    filters = [f for f in (loaded.data or []) if topic is None or f.topic == topic]
    for f in filters:
        if not f.bloom_matches and f.bloom_data is not None:
            warnings.warn(
                f"{loaded.source}: group {f.group!r} on topic {f.topic!r} has bloom data {f.bloom_data} but the "
                f"broker's filter ({bf}) computes {bf.generate(f.bloom_key)} for {f.bloom_key!r}: a broker "
                f"loading this file discards every registration in it",
                ConfigWarning, stacklevel=2,
            )
    return filters


# ------------------------------------------------------------------ consumerOffset.json
def _offset_table(parsed: Any, src: str) -> dict[tuple[str, str], dict[int, int]]:
    table = _table(parsed, "offsetTable", src)
    out: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        where = f"offsetTable.{key}"
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise ConfigFormatError("expected a key \"{topic}@{group}\"", src, field=where)
        topic, group = key.split(TOPIC_GROUP_SEPARATOR, 1)
        if queues is None:
            continue
        if not isinstance(queues, dict):
            raise ConfigFormatError(f"expected an object, found {_json_type(queues)}", src, field=where)
        offsets: dict[int, int] = {}
        for qid, off in queues.items():
            if isinstance(qid, str):  # fastjson reads a quoted integer key the same way
                try:
                    qid = int(qid)
                except ValueError:
                    raise ConfigFormatError(f"expected an integer queue id, found {qid!r}", src,
                                            field=where) from None
            if not isinstance(off, int) or isinstance(off, bool):
                raise ConfigFormatError(f"expected an integer offset, found {_json_type(off)}", src,
                                        field=f"{where}.{qid}")
            offsets[qid] = off
        out[(topic, group)] = offsets
    return out


def read_offset_table(path: str | os.PathLike) -> dict[tuple[str, str], dict[int, int]]:
    """``consumerOffset.json``'s table: (topic, group) -> {queue id: committed offset} (raw, -1 kept)."""
    return load_config(path, _offset_table).data or {}


def _lmq_offset_table(parsed: Any, src: str) -> dict[tuple[str, str], dict[int, int]]:
    out = _offset_table(parsed, src)
    lmq = parsed.get("lmqOffsetTable") if isinstance(parsed, dict) else None
    if lmq is None:
        return out
    if not isinstance(lmq, dict):
        raise ConfigFormatError(f"expected an object, found {_json_type(lmq)}", src, field="lmqOffsetTable")
    for key, off in lmq.items():
        where = f"lmqOffsetTable.{key}"
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
            raise ConfigFormatError("expected a key \"{topic}@{group}\"", src, field=where)
        if not isinstance(off, int) or isinstance(off, bool):
            raise ConfigFormatError(f"expected an integer offset, found {_json_type(off)}", src, field=where)
        topic, group = key.split(TOPIC_GROUP_SEPARATOR, 1)
        out[(topic, group)] = {fmt.LMQ_QUEUE_ID: off}  # an LMQ has one queue
    return out


def read_lmq_offset_table(path: str | os.PathLike) -> dict[tuple[str, str], dict[int, int]]:
    """``lmqConsumerOffset.json``'s tables as one (:func:`read_offset_table`'s form): its
    ``offsetTable`` and, as queue 0, its ``lmqOffsetTable`` (docs/formats.md#lmq)."""
    return load_config(path, _lmq_offset_table).data or {}


def read_committed_offsets(path: str | os.PathLike, group: str, topic: str) -> dict[int, int]:
    """Queue id -> the **next** offset ``group`` will consume in ``topic``, ascending by queue id.

    Queues without a committed offset (absent, or ``-1``) are left out.
    """
    return committed_from_table(read_offset_table(path), group, topic)


def committed_from_table(table: dict[tuple[str, str], dict[int, int]], group: str, topic: str) -> dict[int, int]:
    """``group``'s committed offsets in ``topic`` from :func:`read_offset_table`'s table (none: left out)."""
    offsets = table.get((topic, group), {})
    return {q: offsets[q] for q in sorted(offsets) if offsets[q] >= 0}


# ------------------------------------------------------------------ subscriptionGroup.json / topics.json
def _named_table(name: str) -> Callable[[Any, str], dict[str, dict]]:
    def extract(parsed: Any, src: str) -> dict[str, dict]:
        table = _table(parsed, name, src)
        for key, value in table.items():
            if not isinstance(value, dict):
                raise ConfigFormatError(f"expected an object, found {_json_type(value)}", src,
                                        field=f"{name}.{key}")
        return {str(k): v for k, v in table.items()}

    return extract


def read_subscription_groups(path: str | os.PathLike) -> dict[str, dict]:
    """``subscriptionGroup.json``'s ``subscriptionGroupTable``: group -> its settings as stored."""
    return load_config(path, _named_table("subscriptionGroupTable")).data or {}


def read_topic_configs(path: str | os.PathLike) -> dict[str, dict]:
    """``topics.json``'s ``topicConfigTable``: topic -> its settings as stored."""
    return load_config(path, _named_table("topicConfigTable")).data or {}


# ------------------------------------------------------------------ delayOffset.json
def _delay_offsets(parsed: Any, src: str) -> dict[int, int]:
    table = _table(parsed, "offsetTable", src)
    out: dict[int, int] = {}
    for level, offset in table.items():
        where = f"offsetTable.{level}"
        try:
            level = int(level)
        except (TypeError, ValueError):
            raise ConfigFormatError(f"expected an integer delay level, found {level!r}", src, field=where) from None
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ConfigFormatError(f"expected an integer offset, found {_json_type(offset)}", src, field=where)
        out[level] = offset
    return out


def read_delay_offsets(path: str | os.PathLike) -> dict[int, int]:
    """``delayOffset.json``'s table: delay level -> the next ``SCHEDULE_TOPIC_XXXX`` queue offset
    (queue ``level - 1``) the broker's schedule service will deliver (docs/paths.md#delay-levels).
    A level the table lacks starts at 0, as on the broker; a missing file gives ``{}``."""
    return load_config(path, _delay_offsets).data or {}
