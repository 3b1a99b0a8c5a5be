"""A broker store directory (:mod:`cq.store.store`: :class:`Store`, its concerns in rooms beside it:
:mod:`~cq.store.readers`, :mod:`~cq.store.metadata`, :mod:`~cq.store.cuts`, :mod:`~cq.store.consume`), the
broker's path for a run of units that every reader of decisions calls (:mod:`cq.store.decide`), several
stores read as one cluster (:mod:`cq.store.cluster`), a cache of open stores (:mod:`cq.store.cache`) and a
stream over its cuts (:mod:`cq.store.stream`)."""
from .cache import StoreCache
from .cluster import Cluster, ClusterCut
from .store import ConsumeResult, ConsumeStats, Store, StoreCut

__all__ = ["Cluster", "ClusterCut", "ConsumeResult", "ConsumeStats", "Store", "StoreCache", "StoreCut"]
