#!/usr/bin/env bash
# The Spark pipeline: Java 17 for Spark, and PySpark + pyarrow (the `spark` extra)
# into the repo's .venv, which the Makefile creates before running this script.
set -euo pipefail
cd "$(dirname "$0")/../.."
source .ci/lib.sh

if ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi

PY=.venv/bin/python
[ -x "$PY" ] || { python3 -m venv .venv; }
if ! "$PY" -c "import pyspark, pyarrow, matplotlib" >/dev/null 2>&1 \
   || [ "$("$PY" -c 'import pyspark; print(pyspark.__version__)')" != "4.3.0" ]; then
  .venv/bin/pip install -q -e '.[test,spark]'
fi
