"""The sequence check both idempotent producer stores use (the core's and Cursus's durable one)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.core.idempotence import is_retry
from gateway.model import ErrorCode, GatewayError


@dataclass
class Last:
    epoch: int
    first_seq: int
    last_seq: int


LAST = Last(epoch=3, first_seq=10, last_seq=14)


def test_the_same_first_sequence_in_the_same_epoch_is_a_retry() -> None:
    assert is_retry("p", 3, 10, LAST) is True


@pytest.mark.parametrize(("epoch", "first_seq"), [(3, 15), (4, 0), (4, 10), (9, 99)])
def test_the_next_batch_or_a_newer_epoch_is_new(epoch: int, first_seq: int) -> None:
    assert is_retry("p", epoch, first_seq, LAST) is False


@pytest.mark.parametrize(
    ("epoch", "first_seq", "code", "text"),
    [
        (3, 11, ErrorCode.DUPLICATE_SEQUENCE, "sequence 11 of producer p was already written"),
        (3, 9, ErrorCode.DUPLICATE_SEQUENCE, "sequence 9 of producer p was already written"),
        (3, 16, ErrorCode.OUT_OF_ORDER_SEQUENCE, "producer p sent sequence 16, expected 15"),
        (2, 15, ErrorCode.INVALID_REQUEST, "producer p epoch 2 is fenced"),
    ],
)
def test_a_written_sequence_a_gap_or_an_older_epoch_is_refused(
    epoch: int, first_seq: int, code: ErrorCode, text: str
) -> None:
    with pytest.raises(GatewayError) as err:
        is_retry("p", epoch, first_seq, LAST)
    assert (err.value.code, err.value.message) == (code, text)
