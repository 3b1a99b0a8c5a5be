"""What the store tells about a group: why a message was (not) delivered (:mod:`cq.analyses.why`),
the backlog it will receive (:mod:`cq.analyses.backlog`) and what filtering costs
(:mod:`cq.analyses.cost`, rendered by :mod:`cq.analyses.cost_render`). Built on the Store's public API."""
