#!/usr/bin/env bash
# The Iggy listener's real client: iggy-py 0.4.0 (Rust SDK crate 0.6.202, asyncio), in its own venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh
make_venv .test-venvs/iggy-py iggy-py==0.4.0
