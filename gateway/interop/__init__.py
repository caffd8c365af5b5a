"""Any-to-any: the interoperability matrix (every ordered pair of the five protocols) and its
drivers. ``gateway matrix`` runs it against a running gateway."""

PROTOCOLS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")
