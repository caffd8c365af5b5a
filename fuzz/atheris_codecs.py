"""atheris (libFuzzer) targets for the five codecs, for long runs outside CI.

    pip install atheris
    python fuzz/atheris_codecs.py kafka08 -max_total_time=600 fuzz/corpus/kafka08

Each target feeds the fuzzer's bytes to the codec's server role (the same feed functions as
tests/reliability/test_codec_fuzz.py) and treats any exception other than the codec's own
error type as a crash. Seeds: the protocol's test vectors (written to the corpus dir on start).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import atheris  # noqa: E402

with atheris.instrument_imports():
    from tests.reliability.test_codec_fuzz import CASES  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(CASES)}}} [libFuzzer options] [corpus dir]")
    protocol = sys.argv.pop(1)
    feed, errors, seeds = CASES[protocol]
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if corpus:
        Path(corpus[0]).mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds):
            (Path(corpus[0]) / f"seed-{i}").write_bytes(seed)

    def target(data: bytes) -> None:
        try:
            feed(data)
        except errors:
            pass

    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
