#!/usr/bin/env bash
# Debian packages the tests use (`make test` runs this): Chromium and its driver for the browser
# test of the Prefect and MLflow UIs. Installed when missing and this is root on Debian; otherwise
# says what to install (the browser test then skips, naming the package).
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
else
  echo "note: the browser test needs Debian's ${missing[*]} (sudo apt-get install ${missing[*]}); it skips without them"
fi
