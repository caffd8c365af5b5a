"""Which reply dialect a Cursus connection gets.

Two broker generations answer the same commands differently:

* ``2026-04``: the broker the older Go SDK and cursus-client 0.1.1 were written against (human
  sentences such as ``Topic 'T' now has N partitions``, ``OK`` for a heartbeat), with the additions
  cursus-client 0.1.1 needs (``OK offset=N``, rebalance tokens).
* ``2026-08``: the current broker, whose every reply is ``OK key=value ...`` or
  ``ERROR: snake_case_token key=value ...``, and whose group commands are fenced by ``generation=``
  and ``member=``.

With the listener option ``dialect = "auto"`` a connection answers ``2026-04`` until one of its
commands carries something only the current SDK sends (see :func:`marks_2026_08`); from then on the
connection answers ``2026-08``. ``dialect = "2026-04"`` or ``"2026-08"`` fixes the dialect for every
connection.
"""

from __future__ import annotations

from gateway.protocols.cursus.codec import parse_params

DIALECTS = ("auto", "2026-04", "2026-08")
_MARKED = ("CREATE ", "JOIN_GROUP ", "LEAVE_GROUP ")


def marks_2026_08(upper: str, command: str) -> bool:
    """True when a command (``upper``: the same text upper-cased) is one only the current Go SDK
    sends:

    * ``CREATE ... idempotent=`` (the current SDK and benchmark publisher always send it; the
      older SDK and cursus-client 0.1.1 never do);
    * ``JOIN_GROUP ... generation=`` (a resume, which only the current broker knows);
    * ``LEAVE_GROUP ... generation=`` (required by the current broker, never sent before).

    ``batch=`` on CONSUME/STREAM is not a sign: the older broker took it too, and clients of the
    older dialect (this gateway's own upstream backend among them) send it.
    """
    if not upper.startswith(_MARKED):
        return False
    args = parse_params(command)
    if upper.startswith("CREATE "):
        return "idempotent" in args
    return bool(args.get("generation"))  # JOIN_GROUP, LEAVE_GROUP
