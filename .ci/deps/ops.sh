#!/usr/bin/env bash
# Operations tests: headless Chromium renders the admin status page (tests/test_status_page.py).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install chromium
