"""Bounded decompression of produced records: every Kafka codec round-trips, and a batch that
would inflate beyond the bound is refused before (snappy, zstd with a declared size) or while
(gzip, lz4, zstd without one) it is decompressed, never allocated whole."""

from __future__ import annotations

import pytest

from gateway.backends.kafka.records import compress
from gateway.protocols.kafka import inflate as m
from gateway.protocols.kafka08 import compression as legacy

GARBAGE = {3: b"\x04\x22\x4d\x18\x40\x70\xdfgarbage", 4: b"\x28\xb5\x2f\xfd\x00garbage"}
DATA = b"".join(b"record %d " % i for i in range(5000))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_every_codec_round_trips(codec: int) -> None:
    assert m.inflate(codec, compress(codec, DATA)) == DATA


@pytest.mark.parametrize("codec", [2, 3, 4])
def test_declared_sizes_above_the_bound_are_refused(codec: int) -> None:
    bomb = compress(codec, bytes(4 << 20))
    with pytest.raises(m.TooLarge):
        m.inflate(codec, bomb, limit=1 << 20)


def test_zstd_without_a_declared_size_grows_its_buffer_up_to_the_bound() -> None:
    import cramjam

    streaming = cramjam.zstd.Compressor()
    streaming.compress(DATA)
    frame = bytes(streaming.finish())
    assert m._zstd_content_size(frame) is None  # the case under test
    assert m.inflate(4, frame) == DATA
    with pytest.raises(m.TooLarge):
        m.inflate(4, frame, limit=len(DATA) - 1)


def test_gzip_stops_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(legacy, "MAX_DECOMPRESSED", 1 << 20)
    with pytest.raises(m.TooLarge):
        m.inflate(1, compress(1, bytes(4 << 20)))


def test_linked_lz4_blocks_of_a_large_batch_round_trip() -> None:
    big = DATA * 40  # about 2 MB: many blocks, each may refer to the one before
    assert m.inflate(3, compress(3, big)) == big


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_is_corrupt(codec: int) -> None:
    with pytest.raises(m.Corrupt):
        m.inflate(codec, GARBAGE.get(codec, b"garbage!" * 4))
