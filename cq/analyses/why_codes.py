"""The codes a :class:`cq.analyses.why.Why` is made of: a step's result and what dropped the message.

The decision (:mod:`cq.analyses.why`) sets them; the renderer (:mod:`cq.analyses.why_render`) words
them; ``Why.to_dict()`` carries them as they are (docs/why.md). A module of its own so that both
import it and neither imports the other's private parts.
"""

__all__ = ["DROP", "DROPPED_BY_CLIENT", "DROPPED_BY_COMMIT_LOG", "DROPPED_BY_COMPACTION", "DROPPED_BY_CONSUME_QUEUE",
           "DROPPED_BY_EXPIRY", "INFO", "NOT_REACHED", "PASS"]

#: Results of a step.
PASS, DROP, NOT_REACHED, INFO = "pass", "drop", "not_reached", "info"
#: ``dropped_by`` values.
DROPPED_BY_CONSUME_QUEUE, DROPPED_BY_COMMIT_LOG, DROPPED_BY_CLIENT = "consume_queue", "commit_log", "client"
#: ``dropped_by`` of a unit the broker expired (below its queue's minimum, or its record deleted).
DROPPED_BY_EXPIRY = "expired"
#: ``dropped_by`` of a compaction topic's message the broker's compaction removed from its compaction
#: store (docs/reading.md#compaction-topics).
DROPPED_BY_COMPACTION = "compaction"
