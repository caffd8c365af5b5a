#!/usr/bin/env bash
# Operations tests: headless Chromium renders the admin status page (tests/test_status_page.py);
# curl is the HTTP client of the admin endpoint tests (tests/test_admin.py, test_admin_auth.py).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install chromium curl
