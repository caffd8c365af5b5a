# Sourced by .ci/deps/*.sh. apt_install installs only what is missing and runs `apt-get update`
# at most once per machine boot.
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ ! -e /tmp/.gateway-apt-updated ]; then
    apt-get update -qq && touch /tmp/.gateway-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# make_venv DIR PACKAGE...: a separate venv for a client that conflicts with others.
make_venv() {
  local dir="$1"; shift
  if [ ! -x "$dir/bin/python" ] || [ ! -e "$dir/.installed-$(echo "$*" | md5sum | cut -c1-8)" ]; then
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q "$@"
    touch "$dir/.installed-$(echo "$*" | md5sum | cut -c1-8)"
  fi
}
