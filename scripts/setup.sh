#!/usr/bin/env bash
# Installs what the tests need on a fresh machine (idempotent: skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Rust toolchain is the one prerequisite: everything else is installed below.
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install a current stable Rust toolchain (https://rustup.rs), then run this again" >&2
  exit 1
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "==> apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
    # The downloaded .deb files are not needed once installed; on a small disk they are room the build needs.
    $SUDO apt-get clean
  fi
}

# valgrind for the C ABI leak checks; a C/C++ compiler for the C host and tests; curl, python3
# and chromium for the Logs-view and console checks (scripts/ui-test.sh, scripts/console-test.sh) and the fuzz
# seeds.
apt_install valgrind gcc g++ curl python3 chromium

# PostgreSQL for the shared-store tests: each test runs initdb into a temporary directory and starts its own server
# on a loopback port (examples/server/tests/server_support/postgres.rs), as the postgres user the package creates
# when the tests run as root. The package's own "main" cluster would be unused, and starting it as a service can
# fail where there is no init system (a container), failing the install: on a fresh install, Debian's documented
# switch (create_main_cluster in createcluster.conf, read from its createcluster.d) makes none, so there is no
# service to start.
if ! dpkg -s postgresql >/dev/null 2>&1; then
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/strategy-webhook.conf >/dev/null
fi
apt_install postgresql

# A German locale for the test that a PostgreSQL whose lc_messages is not English is read by its untranslated
# severity (a refused commit said "FEHLER", and was taken for one that may have landed).
apt_install locales
if ! locale -a 2>/dev/null | grep -qix 'de_DE.utf8'; then
  echo "==> localedef de_DE.UTF-8"
  $SUDO localedef -i de_DE -f UTF-8 de_DE.UTF-8
fi

# Pinned tools: the header and the fuzz runs must not change under us.
if [ "$(cbindgen --version 2>/dev/null | awk '{print $2}')" != "0.29.4" ]; then
  echo "==> cargo install cbindgen 0.29.4"
  cargo install cbindgen --version 0.29.4 --locked --force -q
fi
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "0.13.2" ]; then
  echo "==> cargo install cargo-fuzz 0.13.2"
  cargo install cargo-fuzz --version 0.13.2 --locked --force -q
fi
