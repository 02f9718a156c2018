#!/usr/bin/env bash
# A real, unprivileged OVS + OVN sandbox in one directory.
#
#   scripts/sandbox.sh start DIR   start ovsdb-server, ovs-vswitchd (dummy datapath), br-ex, br-int,
#                                  OVN NB/SB ovsdb-servers and ovn-northd, all under DIR
#   scripts/sandbox.sh stop DIR    stop every daemon started in DIR (by the pids kept there)
#   scripts/sandbox.sh env DIR     print `export ...` lines so ovs-vsctl/ovs-ofctl/ovn-nbctl use DIR
#
# Environment knobs for `start`:
#   SANDBOX_OVN=0     skip the OVN NB/SB databases and ovn-northd (OpenFlow-only tests)
#   SANDBOX_BRIDGES=0 start ovs-vswitchd but create no bridges
#
# Nothing here needs root, a kernel module or a system service: ovs-vswitchd runs with
# --enable-dummy=override, so every port is a userspace dummy netdev. Daemons are stopped only by
# the pids recorded in DIR, never by name.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

OVS_SCHEMA=${OVS_SCHEMA:-/usr/share/openvswitch/vswitch.ovsschema}
NB_SCHEMA=${NB_SCHEMA:-/usr/share/ovn/ovn-nb.ovsschema}
SB_SCHEMA=${SB_SCHEMA:-/usr/share/ovn/ovn-sb.ovsschema}

envs() {
    cat <<ENV
export OVS_RUNDIR='$dir'
export OVS_LOGDIR='$dir'
export OVS_DBDIR='$dir'
export OVS_SYSCONFDIR='$dir'
export OVN_RUNDIR='$dir'
export OVN_LOGDIR='$dir'
export OVN_DBDIR='$dir'
export OVN_SYSCONFDIR='$dir'
export OVN_NB_DB='unix:$dir/ovnnb_db.sock'
export OVN_SB_DB='unix:$dir/ovnsb_db.sock'
export DB_SOCK='$dir/db.sock'
ENV
}

# Wait until a path exists (a socket or pidfile appears), or fail with the daemon's log tail.
wait_for() {
    local path=$1 log=$2 i
    for i in $(seq 1 200); do
        [ -e "$path" ] && return 0
        sleep 0.05
    done
    echo "sandbox: timed out waiting for $path" >&2
    [ -f "$log" ] && tail -n 20 "$log" >&2
    return 1
}

start_db() { # name schema socket
    local name=$1 schema=$2 sock=$3
    ovsdb-tool create "$dir/$name.db" "$schema"
    ovsdb-server "$dir/$name.db" \
        --remote="punix:$sock" \
        --pidfile="$dir/$name.pid" --unixctl="$dir/$name.ctl" \
        --log-file="$dir/$name.log" -vconsole:off --detach --no-chdir 2>>"$dir/$name.err"
    wait_for "$sock" "$dir/$name.log"
}

start() {
    eval "$(envs)"
    if [ -e "$dir/ovsdb-server.pid" ]; then
        echo "sandbox: $dir already holds a sandbox (stop it first)" >&2
        exit 1
    fi
    start_db ovsdb-server "$OVS_SCHEMA" "$dir/db.sock"
    ovs-vsctl --db="unix:$dir/db.sock" --no-wait init
    ovs-vswitchd "unix:$dir/db.sock" --enable-dummy=override --disable-system \
        --pidfile="$dir/ovs-vswitchd.pid" --unixctl="$dir/ovs-vswitchd.ctl" \
        --log-file="$dir/ovs-vswitchd.log" -vconsole:off --detach --no-chdir 2>>"$dir/ovs-vswitchd.err"
    wait_for "$dir/ovs-vswitchd.ctl" "$dir/ovs-vswitchd.log"
    if [ "${SANDBOX_BRIDGES:-1}" != 0 ]; then
        ovs-vsctl --db="unix:$dir/db.sock" --timeout=10 \
            -- add-br br-int -- set bridge br-int datapath_type=dummy fail-mode=secure \
            -- add-br br-ex -- set bridge br-ex datapath_type=dummy \
                  other-config:hwaddr=02:00:00:00:00:01 \
            -- add-port br-ex eth0 -- set interface eth0 type=dummy ofport_request=1 \
            -- add-port br-ex patch-ex-to-int -- set interface patch-ex-to-int \
                  type=patch options:peer=patch-int-to-ex ofport_request=2 \
            -- add-port br-int patch-int-to-ex -- set interface patch-int-to-ex \
                  type=patch options:peer=patch-ex-to-int
        # Laid out as ovn-controller does on a node (its localnet patch ports carry
        # external_ids:ovn-localnet-port on the Port row), so vipflow finds eth0 and the patch
        # port without being told.
        ovs-vsctl --db="unix:$dir/db.sock" --timeout=10 \
            -- set Open_vSwitch . external_ids:ovn-bridge-mappings=physnet:br-ex \
            -- set port patch-ex-to-int external_ids:ovn-localnet-port=br-ex_sandbox \
            -- set port patch-int-to-ex external_ids:ovn-localnet-port=br-ex_sandbox
        wait_for "$dir/br-ex.mgmt" "$dir/ovs-vswitchd.log"
    fi
    if [ "${SANDBOX_OVN:-1}" != 0 ]; then
        start_db ovnnb_db "$NB_SCHEMA" "$dir/ovnnb_db.sock"
        start_db ovnsb_db "$SB_SCHEMA" "$dir/ovnsb_db.sock"
        ovn-nbctl --db="unix:$dir/ovnnb_db.sock" --no-wait init
        ovn-northd --ovnnb-db="unix:$dir/ovnnb_db.sock" --ovnsb-db="unix:$dir/ovnsb_db.sock" \
            --pidfile="$dir/ovn-northd.pid" --unixctl="$dir/ovn-northd.ctl" \
            --log-file="$dir/ovn-northd.log" -vconsole:off --detach --no-chdir 2>>"$dir/ovn-northd.err"
        wait_for "$dir/ovn-northd.pid" "$dir/ovn-northd.log"
    fi
}

# Whether a pid is still running. A daemon that exited but was not reaped (the init process of
# some containers never reaps re-parented children) is a zombie: it counts as gone.
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

stop() {
    local name pid i
    # northd first, then the databases it reads, then the switch and its database.
    for name in ovn-northd ovnsb_db ovnnb_db ovs-vswitchd ovsdb-server; do
        [ -f "$dir/$name.pid" ] || continue
        pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
        rm -f "$dir/$name.pid"
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for i in $(seq 1 100); do
            alive "$pid" || break
            sleep 0.02
        done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    done
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    env) envs ;;
    *) usage ;;
esac
