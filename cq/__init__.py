"""RocketMQ store formats and the broker's two-layer message filter.

Read a broker store directory (CommitLog, ConsumeQueue, ConsumeQueueExt)
exactly as the broker reads it, and replay which messages a consumer group
would receive. See :mod:`cq.format` for the file formats.
"""
from .errors import StoreFormatError, TagSubscriptionError
from .format import decorate, is_ext_addr, undecorate
from .tags import ENGINE, SubscriptionData, parse_tag_subscription, tags_code, tags_code_many

__all__ = [
    "ENGINE",
    "StoreFormatError",
    "SubscriptionData",
    "TagSubscriptionError",
    "decorate",
    "is_ext_addr",
    "parse_tag_subscription",
    "tags_code",
    "tags_code_many",
    "undecorate",
]
