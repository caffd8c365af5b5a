"""A grpcio client generated from our .proto (grpc_tools' --grpc_python_out), for the RPCs that
gufo-liftbridge does not have (consumer groups, pause, readonly) and for TLS."""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from types import ModuleType

from grpc_tools import protoc

from gateway.protocols.liftbridge import protogen

_MODULE: ModuleType | None = None


def grpc_module() -> ModuleType:
    """The generated ``liftbridge_api_pb2_grpc`` (APIStub), importing our committed _pb2."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    out = Path(tempfile.mkdtemp(prefix="lb-grpc-"))
    rc = protoc.main(
        [
            "protoc",
            f"-I{protogen.HERE}",
            f"--grpc_python_out={out}",
            str(protogen.HERE / protogen.PROTO),
        ]
    )
    assert rc == 0
    path = out / "liftbridge_api_pb2_grpc.py"
    source = path.read_text().replace(
        "import liftbridge_api_pb2 as",
        "from gateway.protocols.liftbridge import liftbridge_api_pb2 as",
    )
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("liftbridge_api_pb2_grpc", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _MODULE = module
    return module
