#!/usr/bin/env bash
# A real-traffic OVN testbed: nodes, pods and a client as network namespaces on one machine,
# shaped as OVN-Kubernetes builds a cluster in shared gateway mode.
#
#   scripts/testbed.sh start DIR [NODES] [bgp]
#                                         build it under DIR (NODES nodes, default 2, at most 9);
#                                         `bgp`: the LAN's router and a remote client, below
#   scripts/testbed.sh stop DIR           stop every daemon and delete every namespace it made
#   scripts/testbed.sh env DIR NODE       `export ...` lines so ovs-vsctl/ovs-ofctl use NODE's OVS
#   scripts/testbed.sh ns DIR NAME        the namespace of NAME (client, wire, node1, pod1a, router, ...)
#   scripts/testbed.sh node-flows DIR I   put node<I>'s stand-in OVN-Kubernetes flows on br-ex again
#                                         (after its ovs-vswitchd restarted)
#
# What it builds (N nodes, i = 1..N; addresses are private to the testbed's namespaces):
#   wire      a namespace holding a Linux bridge: the L2 segment every node and the client share,
#             and the LAN's router: br0 holds the gateway 172.18.0.1/24, fd00:18::1/64 and
#             forwards (tests add the routes a BGP speaker would)
#   client    172.18.0.2/24, fd00:18::2/64 on eth0, on the wire
#   node<i>   its own ovsdb-server, ovs-vswitchd (userspace datapath, datapath_type=netdev) and
#             ovn-controller (chassis node<i>); br-ex holds the node IP 172.18.0.1<i>/24 and
#             fd00:18::1<i>/64 with MAC 0a:58:ac:12:00:1<i> (the node's default routes go via
#             the gateway on it), and the uplink eth0 (a veth to the wire, MTU 9000 between
#             nodes); br-int is created netdev with fail-mode=secure; ovn-bridge-mappings
#             physnet:br-ex, so ovn-controller makes the localnet patch port
#             patch-br-ex_node<i>-to-br-int on br-ex
#   pod<i>a, pod<i>b  pods of node<i>: 10.244.<i>.1[01]/24, fd00:244:<i>::1[01]/64, a veth into
#             node<i>'s br-int bound to logical switch port pod<i>a / pod<i>b
#   OVN       NB and SB ovsdb-servers and ovn-northd under DIR (unix sockets); logical topology:
#             ovn_cluster_router with node switches node<i> (10.244.<i>.0/24) and the join switch
#             (100.64.0.0/16); per node the gateway router GR_node<i> bound to chassis node<i>,
#             its external port rtoe-GR_node<i> with br-ex's MAC and the node IP on the localnet
#             switch ext_node<i> (localnet port br-ex_node<i>, network physnet), and the default
#             routes OVN-Kubernetes gives it: 0.0.0.0/0 and ::/0 via the gateway on rtoe-GR_node<i>
#
# With `bgp`, the gateway is a router of its own instead of the wire's bridge, and a client sits
# behind it, so that only routes the router learns reach a VIP off every on-link subnet:
#   router    eth0 on the wire (wire port r) holds the gateway 172.18.0.1/24, fd00:18::1/64 (so
#             every node's and gateway router's default route goes through it); eth1 towards
#             remote holds 172.19.0.1/24, fd00:19::1/64; it forwards, and hashes multipath
#             routes on the L4 ports (fib_multipath_hash_policy=1, both families), so one
#             client's connections spread over the next hops. Its BGP speaker is the caller's
#             (testkit's BgpTestbed starts FRR in it and in every node's namespace).
#   remote    172.19.0.2/24, fd00:19::2/64 on eth0, default routes via the router
#
# Needs root (namespaces, veths), Debian's openvswitch-switch, ovn-central, ovn-host, iproute2,
# ethtool. Daemons are stopped by the pids kept in DIR, namespaces by the names kept in DIR.
# Facts it relies on (measured):
# - TX checksum offload off on the non-OVS end of every veth: AF_PACKET hands OVS partial
#   checksums, and the userspace conntrack drops such packets.
# - arp_ignore=8 and disable_ipv6=1 on the OVS end of each veth: the node's kernel also sees the
#   uplink's frames and would answer ARP/ND itself.
# - dynamic_neigh_routers stays off on the gateway routers (OVN 23.03 resets the first
#   connection after a GR learns a peer MAC with it on).
set -euo pipefail

usage() { sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2

OVS_SCHEMA=${OVS_SCHEMA:-/usr/share/openvswitch/vswitch.ovsschema}
NB_SCHEMA=${NB_SCHEMA:-/usr/share/ovn/ovn-nb.ovsschema}
SB_SCHEMA=${SB_SCHEMA:-/usr/share/ovn/ovn-sb.ovsschema}

# The LAN's gateway (on the wire's bridge): every node's and gateway router's default route.
GW4=172.18.0.1
GW6=fd00:18::1

log() { echo "testbed: $*" >&2; }
die() { log "$*"; exit 1; }

# Namespace names carry a short id of their own, kept in DIR, so that testbeds never collide.
tag() { cat "$dir/tag"; }
ns_of() { echo "$(tag)-$1"; }
in_ns() { local n=$1; shift; ip netns exec "$(ns_of "$n")" "$@"; }

add_ns() {
    local n
    n=$(ns_of "$1")
    ip netns add "$n"
    echo "$n" >>"$dir/namespaces"
    ip netns exec "$n" ip link set lo up
}

# veth between two namespaces: link $2 in $1, link $4 in $3. Created inside the namespaces,
# so no name is ever taken in the root namespace.
veth() {
    ip link add "$2" netns "$(ns_of "$1")" type veth peer name "$4" netns "$(ns_of "$3")"
}

# The non-OVS end of a veth: no TX checksum offload (see the header).
no_offload() { in_ns "$1" ethtool -K "$2" tx off >/dev/null 2>&1 || true; }

# The OVS end of a veth: the node's kernel must not answer for it.
ovs_end() {
    in_ns "$1" sysctl -qw "net.ipv4.conf.$2.arp_ignore=8" "net.ipv6.conf.$2.disable_ipv6=1"
    in_ns "$1" ip link set "$2" up
}

wait_for() {
    local path=$1 log=$2 i
    for i in $(seq 1 200); do
        [ -e "$path" ] && return 0
        sleep 0.05
    done
    log "timed out waiting for $path"
    [ -f "$log" ] && tail -n 20 "$log" >&2
    return 1
}

# Run a daemon in the background with its pidfile under $d; $1 = namespace ('' = root).
daemon() {
    local n=$1; shift
    if [ -n "$n" ]; then in_ns "$n" "$@"; else "$@"; fi
}

start_db() { # dir name schema
    local d=$1 name=$2 schema=$3
    ovsdb-tool create "$d/$name.db" "$schema"
    ovsdb-server "$d/$name.db" --remote="punix:$d/$name.sock" \
        --pidfile="$d/$name.pid" --unixctl="$d/$name.ctl" \
        --log-file="$d/$name.log" -vconsole:off --detach --no-chdir 2>>"$d/$name.err"
    wait_for "$d/$name.sock" "$d/$name.log"
}

nb() { ovn-nbctl --db="unix:$dir/ovnnb.sock" "$@"; }

node_mac() { printf '0a:58:ac:12:00:%02x' "$((0x10 + $1))"; }
pod_mac() { printf '0a:58:0a:f4:%02x:%02x' "$1" "$2"; }

start_node() {
    local i=$1 node=node$1 d=$dir/node$1 mac ip ip6
    mac=$(node_mac "$i")
    ip=172.18.0.1$i
    ip6=fd00:18::1$i
    mkdir -p "$d"
    add_ns "$node"
    veth "$node" eth0 wire "n$i"
    no_offload wire "n$i"
    # A jumbo underlay: geneve's 58 bytes must fit around a client's full 1500-byte packet on
    # its way to a pod on another node (OVN-Kubernetes needs this, or pods at MTU 1400).
    in_ns wire ip link set "n$i" mtu 9000 master br0 up
    in_ns "$node" ip link set eth0 mtu 9000
    ovs_end "$node" eth0

    start_db "$d" db "$OVS_SCHEMA"
    local vsctl=(ovs-vsctl --db="unix:$d/db.sock" --timeout=10)
    "${vsctl[@]}" --no-wait init
    "${vsctl[@]}" --no-wait set Open_vSwitch . \
        external_ids:system-id="$node" external_ids:hostname="$node" \
        external_ids:ovn-remote="unix:$dir/ovnsb.sock" \
        external_ids:ovn-encap-type=geneve external_ids:ovn-encap-ip="$ip" \
        external_ids:ovn-bridge-mappings=physnet:br-ex \
        external_ids:ovn-bridge-datapath-type=netdev
    "${vsctl[@]}" --no-wait \
        -- add-br br-int -- set bridge br-int datapath_type=netdev fail-mode=secure \
              other-config:disable-in-band=true \
        -- add-br br-ex -- set bridge br-ex datapath_type=netdev other-config:hwaddr="$mac" \
              other-config:disable-in-band=true \
        -- add-port br-ex eth0
    # OVS_RUNDIR puts br-ex.mgmt, the pidfiles and the control sockets in the node's dir.
    OVS_RUNDIR=$d in_ns "$node" ovs-vswitchd "unix:$d/db.sock" --disable-system \
        --pidfile="$d/ovs-vswitchd.pid" --unixctl="$d/ovs-vswitchd.ctl" \
        --log-file="$d/ovs-vswitchd.log" -vconsole:off --detach --no-chdir \
        2>>"$d/ovs-vswitchd.err"
    wait_for "$d/br-ex.mgmt" "$d/ovs-vswitchd.log"
    # br-ex's internal port is a tap in the node's namespace: it holds the node IP.
    local i2
    for i2 in $(seq 1 100); do in_ns "$node" ip link show br-ex >/dev/null 2>&1 && break; sleep 0.05; done
    in_ns "$node" ip link set br-ex address "$mac"
    in_ns "$node" ip addr add "$ip/24" dev br-ex
    in_ns "$node" ip -6 addr add "$ip6/64" dev br-ex nodad
    in_ns "$node" ip link set br-ex up
    in_ns "$node" ip route add default via "$GW4" dev br-ex
    in_ns "$node" ip -6 route add default via "$GW6" dev br-ex

    OVS_RUNDIR=$d OVN_RUNDIR=$d in_ns "$node" ovn-controller "unix:$d/db.sock" \
        --pidfile="$d/ovn-controller.pid" \
        --log-file="$d/ovn-controller.log" -vconsole:off --detach --no-chdir \
        2>>"$d/ovn-controller.err"
    wait_for "$d/ovn-controller.pid" "$d/ovn-controller.log"
    node_flows "$i"
}

# A minimal stand-in for the flows OVN-Kubernetes keeps on br-ex (cookie 0xa0a0): the node's
# MAC is shared by the host (LOCAL) and the gateway router (behind the patch port), so NORMAL's
# MAC learning alone would flap between the two and send tunnel packets into the router. Tunnel
# packets go to the host; other frames for the node's MAC to both (each drops what is not its
# own); whatever the host or the router sends goes out of the uplink; the rest stays NORMAL.
node_flows() {
    local i=$1 d=$dir/node$1 patch ofport mac
    mac=$(node_mac "$i")
    patch=patch-br-ex_node$i-to-br-int
    ovs-vsctl --db="unix:$d/db.sock" --timeout=30 wait-until interface "$patch" 'ofport>0'
    ofport=$(ovs-vsctl --db="unix:$d/db.sock" get interface "$patch" ofport)
    OVS_RUNDIR=$d ovs-ofctl add-flows br-ex - <<FLOWS
cookie=0xa0a0,priority=20,in_port=eth0,udp,nw_dst=172.18.0.1$i,tp_dst=6081,actions=LOCAL
cookie=0xa0a0,priority=10,in_port=eth0,dl_dst=$mac,actions=LOCAL,output:$ofport
cookie=0xa0a0,priority=10,in_port=LOCAL,actions=output:eth0
cookie=0xa0a0,priority=10,in_port=$ofport,actions=output:eth0
FLOWS
}

start_pod() { # node index, pod letter, index
    local i=$1 l=$2 j=$3 pod=pod$1$2 node=node$1 d=$dir/node$1
    local mac ip=10.244.$i.1$j ip6=fd00:244:$i::1$j
    mac=$(pod_mac "$i" "1$j")
    add_ns "$pod"
    veth "$pod" eth0 "$node" "$pod"
    no_offload "$pod" eth0
    in_ns "$pod" ip link set eth0 address "$mac"
    in_ns "$pod" ip addr add "$ip/24" dev eth0
    in_ns "$pod" ip -6 addr add "$ip6/64" dev eth0 nodad
    in_ns "$pod" ip link set eth0 up
    in_ns "$pod" ip route add default via "10.244.$i.1"
    in_ns "$pod" ip -6 route add default via "fd00:244:$i::1"
    ovs_end "$node" "$pod"
    ovs-vsctl --db="unix:$d/db.sock" --timeout=10 add-port br-int "$pod" \
        -- set interface "$pod" external_ids:iface-id="$pod"
    nb lsp-add "$node" "$pod" -- lsp-set-addresses "$pod" "$mac $ip $ip6"
}

logical_node() {
    local i=$1 node=node$1 gr=GR_node$1 mac
    mac=$(node_mac "$i")
    # Node switch and its router port.
    nb ls-add "$node" -- set logical_switch "$node" other_config:subnet="10.244.$i.0/24" \
        other_config:ipv6_prefix="fd00:244:$i::"
    nb lrp-add ovn_cluster_router "rtos-$node" "$(pod_mac "$i" 1)" "10.244.$i.1/24" "fd00:244:$i::1/64"
    nb lsp-add "$node" "stor-$node" -- lsp-set-type "stor-$node" router \
        -- lsp-set-addresses "stor-$node" router -- lsp-set-options "stor-$node" router-port="rtos-$node"
    # Gateway router on the node's chassis.
    nb lr-add "$gr" -- set logical_router "$gr" options:chassis="$node" \
        options:lb_force_snat_ip=router_ip options:snat-ct-zone=0 \
        options:always_learn_from_arp_request=false
    nb lrp-add "$gr" "rtoj-$gr" "0a:58:64:40:00:$(printf '%02x' $((i + 1)))" \
        "100.64.0.$((i + 1))/16" "fd98::$((i + 1))/64"
    nb lsp-add join "jtor-$gr" -- lsp-set-type "jtor-$gr" router \
        -- lsp-set-addresses "jtor-$gr" router -- lsp-set-options "jtor-$gr" router-port="rtoj-$gr"
    nb lrp-add "$gr" "rtoe-$gr" "$mac" "172.18.0.1$i/24" "fd00:18::1$i/64"
    nb ls-add "ext_$node"
    nb lsp-add "ext_$node" "br-ex_$node" -- lsp-set-type "br-ex_$node" localnet \
        -- lsp-set-addresses "br-ex_$node" unknown -- lsp-set-options "br-ex_$node" network_name=physnet
    nb lsp-add "ext_$node" "etor-$gr" -- lsp-set-type "etor-$gr" router \
        -- lsp-set-addresses "etor-$gr" "$mac" -- lsp-set-options "etor-$gr" router-port="rtoe-$gr"
    nb lr-route-add "$gr" 10.244.0.0/16 100.64.0.1
    # As OVN-Kubernetes does: whatever the router does not know goes to the node's gateway.
    nb lr-route-add "$gr" 0.0.0.0/0 "$GW4" "rtoe-$gr"
    nb lr-route-add "$gr" ::/0 "$GW6" "rtoe-$gr"
    nb lr-route-add "$gr" fd00:244::/32 fd98::1
    nb lr-nat-add "$gr" snat "172.18.0.1$i" 10.244.0.0/16
    # Replies of pods to outside clients leave through their own node's gateway router; replies
    # to a gateway router's own join address (its lb_force_snat_ip) go straight to it: the /32
    # route outranks the pod subnet's src-ip route, which would send them through the pod's own
    # gateway router and its SNAT.
    nb lr-route-add ovn_cluster_router "100.64.0.$((i + 1))/32" "100.64.0.$((i + 1))"
    nb lr-route-add ovn_cluster_router "fd98::$((i + 1))/128" "fd98::$((i + 1))"
    nb --policy=src-ip lr-route-add ovn_cluster_router "10.244.$i.0/24" "100.64.0.$((i + 1))"
    nb --policy=src-ip lr-route-add ovn_cluster_router "fd00:244:$i::/64" "fd98::$((i + 1))"
}

# The LAN's router in a namespace of its own and a client behind it (the header's `bgp`).
start_router() {
    add_ns router
    add_ns remote
    veth router eth0 wire r
    veth router eth1 remote eth0
    no_offload router eth0
    no_offload router eth1
    no_offload wire r
    no_offload remote eth0
    in_ns wire ip link set r master br0 up
    in_ns router ip addr add "$GW4/24" dev eth0
    in_ns router ip -6 addr add "$GW6/64" dev eth0 nodad
    in_ns router ip addr add 172.19.0.1/24 dev eth1
    in_ns router ip -6 addr add fd00:19::1/64 dev eth1 nodad
    in_ns router ip link set eth0 up
    in_ns router ip link set eth1 up
    in_ns router sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 \
        net.ipv4.fib_multipath_hash_policy=1 net.ipv6.fib_multipath_hash_policy=1
    in_ns remote ip addr add 172.19.0.2/24 dev eth0
    in_ns remote ip -6 addr add fd00:19::2/64 dev eth0 nodad
    in_ns remote ip link set eth0 up
    in_ns remote ip route add default via 172.19.0.1
    in_ns remote ip -6 route add default via fd00:19::1
}

start() {
    local nodes=${3:-2} shape=${4:-l2}
    [ "$shape" = l2 ] || [ "$shape" = bgp ] || die "the only option after NODES is bgp"
    [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
    [ "$nodes" -ge 1 ] && [ "$nodes" -le 9 ] || die "NODES must be 1..9"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ -e "$dir/tag" ] && die "$dir already holds a testbed (stop it first)"
    # A start that fails half-way leaves nothing behind.
    trap 'rc=$?; [ $rc -eq 0 ] || [ -n "${TESTBED_KEEP:-}" ] || { log "start failed; cleaning up"; stop; }' EXIT
    # 'vf' + 6 hex digits: unique per testbed, short enough for every name built on it.
    printf 'vf%s' "$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')" >"$dir/tag"
    : >"$dir/namespaces"
    echo "$nodes" >"$dir/nodes"

    add_ns wire
    in_ns wire ip link add br0 type bridge
    in_ns wire ip link set br0 up
    if [ "$shape" = bgp ]; then
        start_router
    else
        # The LAN's router, every node's default gateway.
        in_ns wire ip addr add "$GW4/24" dev br0
        in_ns wire ip -6 addr add "$GW6/64" dev br0 nodad
        in_ns wire sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
    fi
    add_ns client
    veth client eth0 wire c
    no_offload client eth0
    no_offload wire c
    in_ns wire ip link set c master br0 up
    in_ns client ip addr add 172.18.0.2/24 dev eth0
    in_ns client ip -6 addr add fd00:18::2/64 dev eth0 nodad
    in_ns client ip link set eth0 up

    start_db "$dir" ovnnb "$NB_SCHEMA"
    start_db "$dir" ovnsb "$SB_SCHEMA"
    nb --no-wait init
    ovn-northd --ovnnb-db="unix:$dir/ovnnb.sock" --ovnsb-db="unix:$dir/ovnsb.sock" \
        --pidfile="$dir/ovn-northd.pid" --unixctl="$dir/ovn-northd.ctl" \
        --log-file="$dir/ovn-northd.log" -vconsole:off --detach --no-chdir 2>>"$dir/ovn-northd.err"
    wait_for "$dir/ovn-northd.pid" "$dir/ovn-northd.log"

    nb lr-add ovn_cluster_router
    nb ls-add join
    nb lrp-add ovn_cluster_router rtoj-ovn_cluster_router 0a:58:64:40:00:01 100.64.0.1/16 fd98::1/64
    nb lsp-add join jtor-ovn_cluster_router -- lsp-set-type jtor-ovn_cluster_router router \
        -- lsp-set-addresses jtor-ovn_cluster_router router \
        -- lsp-set-options jtor-ovn_cluster_router router-port=rtoj-ovn_cluster_router

    local i
    for i in $(seq 1 "$nodes"); do
        logical_node "$i"
        start_node "$i"
        start_pod "$i" a 0
        start_pod "$i" b 1
    done
    # Ready when every pod port is bound and northd's flows reached every chassis.
    nb --timeout=${TESTBED_WAIT:-60} wait-until logical_switch_port pod1a up=true
    for i in $(seq 1 "$nodes"); do
        nb --timeout=${TESTBED_WAIT:-60} wait-until logical_switch_port "pod${i}a" up=true
        nb --timeout=${TESTBED_WAIT:-60} wait-until logical_switch_port "pod${i}b" up=true
    done
    nb --timeout=${TESTBED_WAIT:-60} --wait=hv sync
}

alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

stop_pidfile() {
    local f=$1 pid i
    [ -f "$f" ] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    rm -f "$f"
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for i in $(seq 1 100); do
        alive "$pid" || return 0
        sleep 0.02
    done
    kill -KILL "$pid" 2>/dev/null || true
}

stop() {
    [ -d "$dir" ] || return 0
    dir=$(cd "$dir" && pwd)
    local d name n
    for d in "$dir"/node*/; do
        [ -d "$d" ] || continue
        for name in ovn-controller ovs-vswitchd db; do stop_pidfile "$d/$name.pid"; done
    done
    for name in ovn-northd ovnsb ovnnb; do stop_pidfile "$dir/$name.pid"; done
    # Any other process a test started inside our namespaces (probes, servers) goes with them.
    if [ -f "$dir/namespaces" ]; then
        while read -r n; do
            [ -n "$n" ] || continue
            for pid in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
            ip netns del "$n" 2>/dev/null || true
        done <"$dir/namespaces"
        : >"$dir/namespaces"
    fi
}

envs() {
    local node=$3 d
    d=$(cd "$dir" && pwd)/$node
    cat <<ENV
export OVS_RUNDIR='$d'
export OVN_RUNDIR='$d'
export DB_SOCK='$d/db.sock'
export OVN_NB_DB='unix:$(cd "$dir" && pwd)/ovnnb.sock'
export OVN_SB_DB='unix:$(cd "$dir" && pwd)/ovnsb.sock'
ENV
}

case "$cmd" in
    start) start "$@" ;;
    node-flows) [ $# -ge 3 ] || usage; dir=$(cd "$dir" && pwd); node_flows "$3" ;;
    stop) stop ;;
    env) [ $# -ge 3 ] || usage; envs "$@" ;;
    ns) [ $# -ge 3 ] || usage; ns_of "$3" ;;
    *) usage ;;
esac
