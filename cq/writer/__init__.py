"""Writing broker stores: :class:`StoreWriter` (:mod:`cq.writer.writer`), the config files
(:mod:`cq.writer.config_writer`), the dispatch of records to units and bitmaps
(:mod:`cq.writer._dispatch`), the sample store (:mod:`cq.writer.sample`), Bloom bitmaps
rebuilt (:mod:`cq.writer.rebuild`) and the recovery a writer opens with
(:mod:`cq.writer.recovery`). Readers never import this package."""
from .writer import (
    DEFAULT_MESSAGE_DELAY_LEVEL,
    DEFAULT_STORE_HOST,
    AppendResult,
    SqlGroup,
    StoreWriter,
    compress_body,
)

__all__ = ["DEFAULT_MESSAGE_DELAY_LEVEL", "DEFAULT_STORE_HOST", "AppendResult", "SqlGroup", "StoreWriter",
           "compress_body"]
