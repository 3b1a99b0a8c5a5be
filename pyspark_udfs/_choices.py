"""The values of the options the data source, the scan job and the CLI share, each defined once.

No pyspark here: the ``rmqfilter`` commands that never start Spark parse these options too
(docs/contributing.md#layers). The data source (``pyspark_udfs/_source.py``) checks its options
against them, the job (``pyspark_udfs/job.py``) its arguments, and ``pyspark_udfs/cli/_options.py``
offers them as the choices of the command-line flags.
"""
from __future__ import annotations

__all__ = ["BODY", "LAYER2_AUTO", "LAYER2_CHOICES", "LAYER2_DEFAULT", "ON_CORRUPT", "OUT_FORMATS"]

#: Option ``on_corrupt`` / ``--on-corrupt``: a corrupt store file fails the read, or is skipped and reported.
ON_CORRUPT = ("fail", "skip")
#: Option ``body`` / ``--body``: decompressed where SYSFLAG says so (``Message.uncompressed_body()``), or as stored.
BODY = ("uncompressed", "stored")
#: ``--layer2`` of ``rmqfilter scan`` (``scan(layer2=...)``): where a SQL92 selector runs.
LAYER2_CHOICES = ("auto", "native", "python")
LAYER2_DEFAULT = "auto"
#: what ``layer2="auto"`` picks: the native expression where the translation is exact (as fast
#: as the reader on the 1 M-message demo store, bench/README.md; no Python evaluates the
#: selector), the reader otherwise, with the reason in the summary.
LAYER2_AUTO = "native"
#: ``--format`` of ``rmqfilter scan --out`` (``scan(out_format=...)``): the files written.
OUT_FORMATS = ("parquet", "json")
