#!/usr/bin/env bash
# Run vipflow's whole test suite: install missing dependencies, then lint and test the workspace.
# Tests start their own OVS/OVN sandboxes in temp dirs; nothing system-wide is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# The build takes a few GB (about 2.5 in CI): say how much room there is, so that a full disk
# reads as that and not only as a compiler's write error.
avail_kb=$(df -Pk . 2>/dev/null | awk 'NR==2 {print $4}') || true
if [ -n "${avail_kb:-}" ]; then
    echo "test.sh: $((avail_kb / 1024)) MiB free for the build"
    if [ "$avail_kb" -lt $((4 * 1024 * 1024)) ]; then
        echo "test.sh: warning: less than 4 GiB free; the build may run out of disk" >&2
    fi
fi

# A one-shot build (CI, a fresh clone) gains nothing from incremental caches but disk: they were
# about a quarter of the target directory.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi

cargo fmt --all -- --check
# Clippy also checks every standard library API used against the workspace's rust-version.
cargo clippy --workspace --all-targets --locked -- -D warnings
# The wire crates must still build without their `tokio` feature: the agent's pure core links
# them without a runtime, and the workspace build alone always turns the feature on.
cargo build -p openflow --no-default-features --locked
cargo build -p ovsdb --no-default-features --locked
# The declared minimum Rust builds the workspace, when that toolchain is installed; without it
# (a machine that cannot fetch toolchains) clippy's incompatible_msrv lint above is the check.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
if rustup run "$msrv" cargo --version >/dev/null 2>&1; then
    cargo "+$msrv" check --workspace --all-targets --locked
else
    echo "test.sh: Rust $msrv is not installed; the minimum version is checked by clippy only"
fi
# Doc links that resolve to nothing (or to a private item from a public page) fail the run.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
cargo test --workspace --locked
