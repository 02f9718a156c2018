#!/usr/bin/env bash
# vipflow demo: a private OVS sandbox (real ovs-vswitchd, dummy datapath, nothing system-wide),
# vipflow programming br-ex from examples/services.yaml, and the operator's view of the result.
#
#   scripts/demo.sh          run the demo and clean up
#   scripts/demo.sh --keep   leave the sandbox running and print how to inspect it
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
[ "${1:-}" = "--keep" ] && keep=1

scripts/install-deps.sh
echo "== building vipflow"
cargo build --release --locked -q
vipflow=$PWD/target/release/vipflow

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
