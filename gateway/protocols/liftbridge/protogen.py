"""Regenerate ``liftbridge_api_pb2.py`` (and its ``.pyi``) from ``liftbridge_api.proto``.

    python -m gateway.protocols.liftbridge.protogen          # rewrite the generated files
    python -m gateway.protocols.liftbridge.protogen --check  # exit 1 if they are stale

The generated module is committed, so installing the gateway needs only the ``protobuf``
runtime, not a compiler. Generating needs ``grpcio-tools`` (the ``test`` extra pins the version
whose protoc wrote the committed file; the runtime must be at least that protobuf version).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "liftbridge_api.proto"
OUTPUTS = ("liftbridge_api_pb2.py", "liftbridge_api_pb2.pyi")


def generate(out_dir: Path) -> None:
    """Run protoc (from grpcio-tools) on the .proto, writing into ``out_dir``."""
    from grpc_tools import protoc  # only needed to regenerate

    args = [
        "protoc",
        f"-I{HERE}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        str(HERE / PROTO),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTO}")


def stale_outputs() -> list[str]:
    """Names of committed outputs that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in OUTPUTS
            if not (HERE / name).exists()
            or (Path(tmp) / name).read_bytes() != (HERE / name).read_bytes()
        ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        stale = stale_outputs()
        for name in stale:
            print(f"stale: {name} (run python -m gateway.protocols.liftbridge.protogen)")
        return 1 if stale else 0
    generate(HERE)
    print("wrote " + ", ".join(OUTPUTS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
