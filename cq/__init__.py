"""RocketMQ store formats and the broker's two-layer message filter.

Read a broker store directory (CommitLog, ConsumeQueue, ConsumeQueueExt)
exactly as the broker reads it, and replay which messages a consumer group
would receive. See :mod:`cq.format` for the file formats.

>>> import cq
>>> cq.tags_code("TagA")
2598919
"""
import importlib

from .analyses.backlog import backlog
from .analyses.search import find
from .analyses.why import MessageNotFoundError, find_messages, why
from .errors import (
    ObjectStoreError,
    StoreFileDeleted,
    StoreFormatError,
    TagSubscriptionError,
    UnknownGroupError,
    UnsupportedLayoutError,
)
from .filter.custom import FilterError, MessageFilter, batch_filter, load_filter
from .filter.layers import RetrySqlFilter, SqlFilter, TagFilter
from .format import MAX_ADDR, decorate, is_ext_addr, undecorate
from .kernels import ENGINE as _SCAN_ENGINE
from .kernels import check_bitmaps, check_ext_batch, scan_tags
from .readers.batchcq import BatchConsumeQueue
from .readers.commitlog import CommitLog, Message
from .readers.compaction import CompactionConsumeQueue, CompactionLog, read_position_checkpoint
from .readers.config import ConfigFormatError, ConfigWarning, RegisteredFilter
from .readers.consumequeue import ConsumeQueue
from .readers.dledger import DLedgerCommitLog
from .readers.ext import ConsumeQueueExt, CqExtUnit
from .readers.indexfile import IndexFile, IndexFiles
from .readers.objects import ObjectStore
from .readers.tiered import Tier, TieredMetadata, TieredQueue, TieredStoreError
from .readers.timer import TimerCheckpoint, TimerFiles, TimerLog, TimerWheel
from .store.cache import StoreCache
from .store.cluster import Cluster, ClusterCut, open_stores
from .store.modes import StoreLayout, detect_layout
from .store.releases import WrittenBy, written_by
from .store.store import ConsumeResult, ConsumeStats, Store, StoreCut
from .tags import ENGINE as _TAGS_ENGINE
from .tags import SubscriptionData, parse_tag_subscription, tags_code, tags_code_many

#: "cython" when the compiled engines are in use, "python" for the pure-Python twins.
ENGINE = "cython" if _SCAN_ENGINE == _TAGS_ENGINE == "cython" else "python"

__all__ = [
    "ENGINE",
    "MAX_ADDR",
    "BatchConsumeQueue",
    "Cluster",
    "ClusterCut",
    "CommitLog",
    "CompactionConsumeQueue",
    "CompactionLog",
    "ConfigFormatError",
    "ConfigWarning",
    "ConsumeQueue",
    "ConsumeQueueExt",
    "ConsumeResult",
    "ConsumeStats",
    "CqExtUnit",
    "DLedgerCommitLog",
    "FilterError",
    "IndexFile",
    "IndexFiles",
    "Message",
    "MessageFilter",
    "MessageNotFoundError",
    "ObjectStore",
    "ObjectStoreError",
    "RegisteredFilter",
    "RetrySqlFilter",
    "SqlFilter",
    "Store",
    "StoreCache",
    "StoreCut",
    "StoreFileDeleted",
    "StoreFormatError",
    "StoreLayout",
    "SubscriptionData",
    "TagFilter",
    "TagSubscriptionError",
    "Tier",
    "TieredMetadata",
    "TieredQueue",
    "TieredStoreError",
    "TimerCheckpoint",
    "TimerFiles",
    "TimerLog",
    "TimerWheel",
    "UnknownGroupError",
    "UnsupportedLayoutError",
    "WrittenBy",
    "backlog",
    "batch_filter",
    "check_bitmaps",
    "check_ext_batch",
    "decorate",
    "detect_layout",
    "find",
    "find_messages",
    "is_ext_addr",
    "load_filter",
    "open_stores",
    "parse_tag_subscription",
    "read_position_checkpoint",
    "scan_tags",
    "tags_code",
    "tags_code_many",
    "undecorate",
    "why",
    "written_by",
]

#: Names of the writing side, each with the module that defines it.
_WRITER_NAMES = {
    "StoreWriter": "writer.writer",
    "SqlGroup": "writer.writer",
    "AppendResult": "writer.writer",
    "rebuild_bitmaps": "writer.rebuild",
    "generate_sample_store": "writer.sample",
    "write_dledger_store": "writer.dledger",
}


def __getattr__(name: str):
    # The writing side imports lazily: readers never pay for it, and never break with it.
    module = _WRITER_NAMES.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module 'cq' has no attribute {name!r}")
