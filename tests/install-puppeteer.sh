#!/usr/bin/env bash
# Installs puppeteer-core, the driver the live-page tests (tests/tests/e2e/
# serve.rs) steer the installed chromium with, into .cache/puppeteer-core/
# <version>/ (ignored by git), and reuses it when present. Prints the
# folder holding its node_modules on stdout. It downloads no browser:
# puppeteer-core only drives the one tests/install-browser.sh gives.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

version=25.16.0
npm_cached puppeteer-core "$version" ralph-test-browser-driver
say "puppeteer-core $version ready"
echo "$dir"
