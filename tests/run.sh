#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need,
# then runs every test of the workspace (unit tests and the end-to-end tests
# that start the real berthd).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Rust toolchain is the machine's; nothing else is needed yet.
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)" >&2; exit 1; }

cargo test --workspace --locked "$@"
