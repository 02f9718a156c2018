#!/usr/bin/env bash
# vipflow demo.
#
# With root (network namespaces), the whole product with real packets: scripts/testbed.sh builds
# three OVN-Kubernetes-shaped nodes (ovs-vswitchd on the userspace datapath, ovn-controller, gateway
# routers), three pods serving HTTP and a client on one L2 segment; `vipflow agent` runs on each
# node from examples/testbed.yaml; the demo shows the flows, the Northbound rows, an ARP request
# for the VIP answered, and `curl` from the client to the VIP reaching a pod, with the flows'
# packet counters; then the owner node's uplink is cut while the client curls the VIP, and the
# next node takes the VIP over. Everything lives in its own namespaces and temp dir and is
# removed at the end.
#
# Without root it falls back to a private OVS sandbox (real ovs-vswitchd, dummy datapath) with
# vipflow programming br-ex from examples/services.yaml and ofproto/trace in place of packets.
#
#   scripts/demo.sh          run the demo and clean up
#   scripts/demo.sh --keep   leave everything running and print how to inspect it
#   scripts/demo.sh --dummy  the dummy-datapath demo even where namespaces are available
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
dummy=0
for a in "$@"; do
    case "$a" in
        --keep) keep=1 ;;
        --dummy) dummy=1 ;;
        *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
if [ "$dummy" = 0 ] && { [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; }; then
    echo "== no network namespaces here (needs root): the dummy-datapath demo instead"
    dummy=1
fi

scripts/install-deps.sh
echo "== building vipflow"
cargo build --release --locked -q
vipflow=$PWD/target/release/vipflow

real_demo() {
    local t
    dir=$(mktemp -d /tmp/vipflow-demo.XXXXXX)
    pids=()
    # The agents by pid; the pods' servers go with their namespaces (testbed.sh stop).
    cleanup_real() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        if [ "$keep" = 0 ]; then
            scripts/testbed.sh stop "$dir"
            rm -rf "$dir"
        fi
    }
    trap cleanup_real EXIT
    echo "== building the testbed in $dir: 3 nodes, 6 pods, a client (namespaces, real OVS + OVN)"
    scripts/testbed.sh start "$dir" 3
    t=$(cat "$dir/tag")
    ns() { ip netns exec "$t-$1" "${@:2}"; }
    ofctl() { OVS_RUNDIR="$dir/$1" ovs-ofctl -O OpenFlow13 "${@:2}"; }
    nbctl() { ovn-nbctl --db="unix:$dir/ovnnb.sock" "$@"; }

    # Each pod serves HTTP on 8080 and says who it is and whom it sees.
    for pod in pod1a pod2a pod3a; do
        ip netns exec "$t-$pod" python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(s):
        b = f"hello from {sys.argv[1]}, you are {s.client_address[0]}\n".encode()
        s.send_response(200); s.send_header("Content-Length", str(len(b))); s.end_headers()
        s.wfile.write(b)
    def log_message(s, *a): pass
http.server.HTTPServer(("0.0.0.0", 8080), H).serve_forever()' "$pod" &
        disown
    done

    cp examples/testbed.yaml "$dir/objects.yaml"
    echo
    head -c 32 /dev/urandom | base64 >"$dir/membership.key"
    echo "== vipflow agent on node1 (also the Northbound writer), node2 and node3, announcing the VIPs"
    echo "   (--announce: one node per VIP answers ARP/ND for it from its switch; rows as"
    echo "   --node-rows auto picks them on this OVN). Each agent runs in its node's network"
    echo "   namespace, as a host-network pod does, and the agents watch each other over the"
    echo "   nodes' network (--membership-key-file): a node that goes silent loses its VIPs."
    for i in 1 2 3; do
        local nb=()
        [ "$i" = 1 ] && nb=(--nb-remote "unix:$dir/ovnnb.sock" --node-router 'GR_{node}'
            --node-switch '{node}')
        ns "node$i" "$vipflow" agent --announce --membership-key-file "$dir/membership.key" \
            --objects "$dir/objects.yaml" --node-name "node$i" \
            --ovs-rundir "$dir/node$i" --poll-interval-ms 100 "${nb[@]}" 2>"$dir/node$i/vipflow.log" &
        pids+=($!)
    done
    for _ in $(seq 1 100); do
        grep -q synced "$dir/node1/vipflow.log" 2>/dev/null \
            && grep -q synced "$dir/node2/vipflow.log" 2>/dev/null \
            && grep -q synced "$dir/node3/vipflow.log" 2>/dev/null \
            && nbctl lb-list | grep -q 172.18.0.100 && break
        sleep 0.1
    done
    nbctl --timeout=30 --wait=hv sync

    echo
    echo "== node1's br-ex: vipflow's flows (cookie 0x7f1f...) beside the node's own"
    ofctl node1 dump-flows br-ex --no-stats
    echo
    echo "== the Northbound rows vipflow wrote"
    nbctl lb-list
    nbctl find Load_Balancer external_ids:vipflow.io/managed=true | grep -E '^(name|options|external_ids)'

    echo
    echo "== ARP for the VIP from the wire: the owner's switch answers (no address on any host)"
    ns client arping -c 1 -w 2 -I eth0 172.18.0.100 || true
    local owner=node1
    for n in node1 node2 node3; do
        if grep -q 'announced.*172.18.0.100' "$dir/$n/vipflow.log"; then owner=$n; fi
    done
    echo "   (the owner is $owner; the other nodes drop ARP for the VIP)"

    echo
    echo "== curl from the client to the VIP: into OVN on $owner, load-balanced to a pod"
    for _ in 1 2 3 4; do
        ns client curl -s --max-time 2 --retry 5 --retry-all-errors http://172.18.0.100/ || true
    done

    echo
    echo "== the flows' packet counters on $owner after that"
    OVS_RUNDIR="$dir/$owner" ovs-appctl -t "$dir/$owner/ovs-vswitchd.ctl" revalidator/wait
    ofctl "$owner" dump-flows br-ex cookie=0x7f1f000000000000/0xffff000000000000 \
        | sed -E 's/ duration=[^,]*,//; s/ idle_age=[^,]*,//'

    echo
    echo "== vipflow verify on node1: the bridge and the Northbound database hold exactly the plan"
    "$vipflow" verify --announce --objects "$dir/objects.yaml" --node-name node1 \
        --ovs-rundir "$dir/node1" --nb-remote "unix:$dir/ovnnb.sock" --node-router 'GR_{node}' \
        --node-switch '{node}' || true

    failover "$owner"

    if [ "$keep" = 1 ]; then
        echo
        echo "Kept in $dir. Namespaces: $(tr '\n' ' ' <"$dir/namespaces")"
        echo "  ip netns exec $t-client curl http://172.18.0.100/"
        echo "  OVS_RUNDIR=$dir/node1 ovs-ofctl -O OpenFlow13 dump-flows br-ex"
        echo "  ovn-nbctl --db=unix:$dir/ovnnb.sock lb-list"
        echo "Stop it with: scripts/testbed.sh stop $dir (vipflow agents: kill ${pids[*]})"
        pids=()
    fi
}

# The owner's uplink cut while the client curls the VIP every 100 ms: the VIP's next owner (its
# successor, which hears the owner's heartbeat every 20 ms) finds it silent, confirms that
# through the third node, takes the VIP and sends a gratuitous ARP that moves the client. The
# owner's pod leaves the Service's endpoints first, as Kubernetes takes a dead node's pods out;
# without that, every connection OVN balanced to it would fail whoever announces, and what is
# shown here is the announcement.
failover() {
    local owner=$1
    echo
    echo "== failover: $owner's uplink cut while the client curls the VIP every 100 ms"
    python3 - "$dir/objects.yaml" "$owner" <<'PY'
import sys
path, owner = sys.argv[1], sys.argv[2]
lines = open(path).read().split("\n")
out, i = [], 0
while i < len(lines):
    l = lines[i]
    if l.startswith("  - addresses:"):
        item = [l]
        while i + 1 < len(lines) and lines[i + 1].startswith("    "):
            i += 1
            item.append(lines[i])
        if f"    nodeName: {owner}" not in item:
            out.extend(item)
    else:
        out.append(l)
    i += 1
open(path + ".new", "w").write("\n".join(out))
PY
    mv "$dir/objects.yaml.new" "$dir/objects.yaml"
    sleep 1
    nbctl --timeout=30 --wait=hv sync
    echo "   ($owner's pod left the Service's endpoints; the VIP is still announced by $owner)"
    ns client bash -c '
        for i in $(seq 1 40); do
            r=$(curl -s --max-time 0.5 http://172.18.0.100/ | cut -d, -f1)
            echo "${r:-none}"
            sleep 0.1
        done' >"$dir/curl.log" &
    local curls=$!
    sleep 1
    local cut_at
    cut_at=$(date +%s%N)
    ns wire ip link set "n${owner#node}" down
    echo "   $(date -u +%T.%3N) $owner's uplink is down"
    wait "$curls" || true
    echo "   the client's requests in order (. answered by a pod, x not within 0.5 s):"
    awk '{ printf "%s", ($1 == "hello") ? "." : "x"; n++; if ($1 != "hello") lost++ }
        END { printf "\n   %d requests, %d not answered\n", n, lost }' "$dir/curl.log" | sed '1s/^/   /'
    local n
    for n in node1 node2 node3; do
        [ "$n" = "$owner" ] && continue
        grep -E 'watch: owner confirmed down|announced: gratuitous ARP' "$dir/$n/vipflow.log" \
            | sed -E 's/\x1b\[[0-9;]*m//g' | while read -r at _ _ rest; do
                if [ "$(date -d "$at" +%s%N)" -gt "$cut_at" ]; then
                    echo "   $n, $(( ($(date -d "$at" +%s%N) - cut_at) / 1000000 )) ms after the cut: ${rest%% bridge=*}"
                fi
            done || true
    done
    ns client ip neigh show 172.18.0.100 | sed 's/^/   client: /'
    ns wire ip link set "n${owner#node}" up
}

dummy_demo() {


dir=$(mktemp -d /tmp/vipflow-demo.XXXXXX)
agent_pid=
cleanup() {
    [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null || true
    if [ "$keep" = 0 ]; then
        scripts/sandbox.sh stop "$dir"
        rm -rf "$dir"
    fi
}
trap cleanup EXIT

SANDBOX_OVN=0 scripts/sandbox.sh start "$dir"
export OVS_RUNDIR=$dir
ofctl() { ovs-ofctl -O OpenFlow13 "$@"; }
trace() { ovs-appctl -t "$dir/ovs-vswitchd.ctl" ofproto/trace br-ex "$1"; }
cp examples/services.yaml "$dir/objects.yaml"

echo
echo "== the bridge before vipflow"
ofctl show br-ex | grep -E '^ [0-9A-Z]+\('
ofctl dump-flows br-ex

echo
echo "== vipflow plan (what it will write; ports it finds in the OVS database when running shown by role)"
"$vipflow" plan --objects "$dir/objects.yaml"

echo
echo "== vipflow agent, running on $dir/objects.yaml"
"$vipflow" agent --objects "$dir/objects.yaml" --ovs-rundir "$dir" --poll-interval-ms 100 \
    2>"$dir/vipflow.log" &
agent_pid=$!
for _ in $(seq 1 100); do
    grep -q '"synced"\|synced' "$dir/vipflow.log" 2>/dev/null && break
    sleep 0.1
done
ofctl dump-flows br-ex

echo
echo "== ofproto/trace: an ARP request for the VIP 172.18.0.100 from the wire goes to the host (LOCAL)"
trace 'in_port=eth0,arp,arp_op=1,arp_tpa=172.18.0.100,arp_spa=172.18.0.1,dl_src=02:aa:00:00:00:01,dl_dst=ff:ff:ff:ff:ff:ff' \
    | sed -n '/^bridge/,$p'

echo
echo "== ofproto/trace: TCP to 172.18.0.100:80 is steered into OVN through the patch port"
trace 'in_port=eth0,tcp,nw_src=198.51.100.7,nw_dst=172.18.0.100,tp_src=40000,tp_dst=80,dl_dst=02:00:00:00:00:01' \
    | sed -n '/^bridge/,/^Final/p'

echo
echo "== a new Service appears in the file: only its flows are added"
cat >>"$dir/objects.yaml" <<'YAML'
- apiVersion: v1
  kind: Service
  metadata: {name: api, namespace: team, creationTimestamp: "2026-02-01T00:00:00Z"}
  spec:
    type: ClusterIP
    externalIPs: [172.18.0.200]
    ports: [{port: 8443, protocol: TCP}]
YAML
for _ in $(seq 1 50); do
    ofctl dump-flows br-ex | grep -q 172.18.0.200 && break
    sleep 0.1
done
ofctl dump-flows br-ex | grep 172.18.0.200

echo
echo "== vipflow verify"
"$vipflow" verify --objects "$dir/objects.yaml" --ovs-rundir "$dir"

echo
echo "== agent log"
cat "$dir/vipflow.log"

if [ "$keep" = 1 ]; then
    echo
    echo "Sandbox kept in $dir (agent stopped; flows stay). Inspect it with:"
    echo "  export OVS_RUNDIR=$dir; ovs-ofctl -O OpenFlow13 dump-flows br-ex"
    echo "Stop it with: scripts/sandbox.sh stop $dir"
fi
}

if [ "$dummy" = 1 ]; then dummy_demo; else real_demo; fi
