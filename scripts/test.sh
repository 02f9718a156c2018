#!/usr/bin/env bash
# Run vipflow's whole test suite: install missing dependencies, then lint and test the workspace.
# Tests start their own OVS/OVN sandboxes in temp dirs; nothing system-wide is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# A one-shot build (CI, a fresh clone) gains nothing from incremental caches but disk: they were
# about a quarter of the target directory.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
