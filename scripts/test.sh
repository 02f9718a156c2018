#!/usr/bin/env bash
# Run vipflow's whole test suite: install missing dependencies, then lint and test the workspace.
# Tests start their own OVS/OVN sandboxes in temp dirs; nothing system-wide is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
