"""Any-to-any: the interoperability matrix (every ordered pair of its clients) and its drivers.
``gateway matrix`` runs it against a running gateway."""

PROTOCOLS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")
"""The five listener protocols (and the protocols of upstream backends)."""

CLIENTS = (*PROTOCOLS, "kafka")
"""The matrix's producers and consumers: one per protocol, plus ``kafka``, today's Kafka client
(confluent-kafka) on the same Kafka listener as ``kafka08``."""

LISTENER = {name: name for name in PROTOCOLS} | {"kafka": "kafka08"}
"""The listener each matrix client speaks to."""
