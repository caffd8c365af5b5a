#!/usr/bin/env bash
# Monitoring tests: a real Prometheus scrapes a real gateway and evaluates the dashboard's and the
# alert rules' queries; promtool checks the rules file (tests/ops/test_prometheus.py).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install prometheus
