#!/bin/bash
# The whole test suite on a fresh Debian 12 machine, as root: packages, lint, build, the rig
# (booted systemd nodes), then every test. The rig is torn down however the run ends.
set -euo pipefail
cd "$(dirname "$0")/.."

tests/rig.sh install
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features crash-points -- -D warnings
# The integration tests run the binary with its crash points (tests/faults.rs).
cargo build --all-targets --features crash-points

trap 'tests/rig.sh down' EXIT
tests/rig.sh up
if command -v cargo-nextest >/dev/null; then
  cargo nextest run --no-fail-fast --features crash-points
else
  cargo test --no-fail-fast --features crash-points
fi
