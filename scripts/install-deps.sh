#!/usr/bin/env bash
# Install what vipflow's build, tests and demo need, when missing. Idempotent: a second run on a
# ready machine does nothing but check.
#
#   OVS/OVN: openvswitch-switch, ovn-central, ovn-host (Debian's packages: OVS 3.1, OVN 23.03);
#   FRR 8.4 (frr: bgpd, bfdd, zebra, vtysh) for the BGP tests, installed without starting it;
#   for the real-packet testbed and demo: iproute2, ethtool, curl, iputils-arping, python3.
#   The Rust toolchain is expected on the machine (cargo, rustc).
set -euo pipefail

need=()
# The real-packet testbed and demo also use iproute2 (namespaces, veths), ethtool (checksum
# offload off), curl and arping (the demo's client), python3 (the demo's pods).
for pair in ovs-vswitchd:openvswitch-switch ovn-northd:ovn-central ovn-controller:ovn-host \
            ovs-ofctl:openvswitch-common ip:iproute2 ethtool:ethtool curl:curl \
            arping:iputils-arping python3:python3; do
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

# FRR (bgpd, bfdd, zebra, vtysh) for the BGP tests: each test runs its own daemons in its own
# network namespaces and paths. Debian's package starts a system FRR on install: install it
# under a policy-rc.d that refuses, so nothing system-wide starts.
if ! command -v vtysh >/dev/null 2>&1 || [ ! -x /usr/lib/frr/bgpd ]; then
    SUDO=
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "install-deps: installing frr (no service started)" >&2
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    [ -e "$policy" ] && had_policy=1
    if [ "$had_policy" = 0 ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
        $SUDO chmod +x "$policy"
    fi
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends frr
    [ "$had_policy" = 0 ] && $SUDO rm -f "$policy"
fi

# The packages' own services are not used (the sandbox starts private daemons); make sure
# nothing system-wide was left running by the install on machines that run init scripts.
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found (install Rust)" >&2; exit 1; }

# deploy/ manifests are validated offline (tests/deploy_manifests.rs) with kubernetes-validate, a
# Python package that ships the Kubernetes JSON schemas. It goes into a private virtualenv under
# the gitignored target-tools/, never into the system's Python. The test finds it there (or
# through $KUBERNETES_VALIDATE, or on PATH).
KV_VERSION=1.34.1
kv_venv="$(cd "$(dirname "$0")/.." && pwd)/target-tools/venv"
kv_bin="$kv_venv/bin/kubernetes-validate"
if [ "$("$kv_bin" --version 2>/dev/null)" != "$KV_VERSION" ]; then
    echo "install-deps: installing kubernetes-validate $KV_VERSION into $kv_venv" >&2
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv --help >/dev/null 2>&1 \
        || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
        # Debian splits venv/ensurepip out of python3.
        SUDO=
        [ "$(id -u)" -eq 0 ] || SUDO=sudo
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
            python3 python3-venv
    fi
    rm -rf "$kv_venv"
    python3 -m venv "$kv_venv"
    "$kv_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "kubernetes-validate==$KV_VERSION"
    [ "$("$kv_bin" --version)" = "$KV_VERSION" ] || {
        echo "install-deps: kubernetes-validate $KV_VERSION did not install" >&2
        exit 1
    }
fi
