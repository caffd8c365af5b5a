"""Bounded decompression of produced records: every Kafka codec round-trips, and a batch that
would inflate beyond the bound is refused before (snappy, zstd with a declared size) or while
(gzip, lz4, zstd without one) it is decompressed, never allocated whole."""

from __future__ import annotations

import pytest

from gateway.backends.kafka.records import compress
from gateway.protocols.kafka import inflate as m

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


def test_gzip_stops_at_the_bound() -> None:
    with pytest.raises(m.TooLarge):
        m.inflate(1, compress(1, bytes(4 << 20)), limit=1 << 20)
    assert m.inflate(1, compress(1, bytes(1 << 20)), limit=1 << 20) == bytes(1 << 20)


def test_linked_lz4_blocks_of_a_large_batch_round_trip() -> None:
    big = DATA * 40  # about 2 MB: many blocks, each may refer to the one before
    assert m.inflate(3, compress(3, big)) == big


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_is_corrupt(codec: int) -> None:
    with pytest.raises(m.Corrupt):
        m.inflate(codec, GARBAGE.get(codec, b"garbage!" * 4))


def test_gzip_inflates_in_steps_of_16_mib() -> None:
    """64 MiB from a gzip payload of about 64 KB: four steps, yielding between two."""
    steps = m.inflate_steps(1, compress(1, bytes(64 << 20)))
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            out = done.value
            break
        yields += 1
    assert 3 <= yields <= 4 and out == bytes(64 << 20)


def test_a_truncated_gzip_payload_gives_what_it_holds() -> None:
    data = compress(1, DATA * 40)
    assert (DATA * 40).startswith(m.inflate(1, data[: len(data) // 2]))
