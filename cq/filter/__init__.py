"""The broker's filter: its two layers for tag, SQL92 and retry subscriptions (:mod:`cq.filter.layers`)
and the custom message filters run after them (:mod:`cq.filter.custom`)."""
from .custom import FilterError, MessageFilter, batch_filter, load_filter
from .layers import RetryLookup, RetryPropertiesError, RetrySqlFilter, SqlFilter, TagFilter, retry_group

__all__ = ["FilterError", "MessageFilter", "RetryLookup", "RetryPropertiesError", "RetrySqlFilter", "SqlFilter",
           "TagFilter", "batch_filter", "load_filter", "retry_group"]
