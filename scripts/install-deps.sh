#!/usr/bin/env bash
# Install what vipflow's build, tests and demo need, when missing. Idempotent: a second run on a
# ready machine does nothing but check.
#
#   OVS/OVN: openvswitch-switch, ovn-central, ovn-host (Debian's packages: OVS 3.1, OVN 23.03).
#   The Rust toolchain is expected on the machine (cargo, rustc).
set -euo pipefail

need=()
for pair in ovs-vswitchd:openvswitch-switch ovn-northd:ovn-central ovn-controller:ovn-host \
            ovs-ofctl:openvswitch-common; do
    bin=${pair%%:*}
    pkg=${pair#*:}
    command -v "$bin" >/dev/null 2>&1 || need+=("$pkg")
done

if [ ${#need[@]} -gt 0 ]; then
    SUDO=
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "install-deps: installing ${need[*]}" >&2
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# The packages' own services are not used (the sandbox starts private daemons); make sure
# nothing system-wide was left running by the install on machines that run init scripts.
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found (install Rust)" >&2; exit 1; }
