"""The committed liftbridge_api_pb2 module is what protoc makes of liftbridge_api.proto."""

from __future__ import annotations

from gateway.protocols.liftbridge import protogen


def test_committed_generated_code_is_up_to_date() -> None:
    assert protogen.stale_outputs() == []
