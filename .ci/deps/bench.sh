#!/usr/bin/env bash
# The latency benchmark's C load generator (bench/loadgen.c) is built with the machine's C compiler;
# tests/test_bench_loadgen.py builds and runs it.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
