#!/usr/bin/env bash
# Run vipflow's benchmarks and write their figures into BENCHMARKS.md.
#
# Usage:
#   scripts/bench.sh                        run every benchmark below, in this order
#   scripts/bench.sh --only NAME[,NAME...]  run only these; a NAME also selects its variants
#                                           NAME_*, so `--only agent_whole` runs both modes
#   scripts/bench.sh --no-write             run and print, but leave BENCHMARKS.md as it is
#   scripts/bench.sh --help                 print this text
#
# The benchmarks (NAME: what `cargo bench` runs):
#   bundle_install       -p openflow --bench bundle_install: N flows in one bundle vs ovs-ofctl
#   agent_sync           --bench agent_sync: full flow sync, one Service change, planning by size
#   nb_bench             -p ovsdb --bench nb_bench: OVSDB transactions vs a raw-socket client
#   bulk_insert          -p ovsdb --bench bulk_insert: where one 10,000-row transaction's time goes
#   monitor_memory       -p ovsdb --bench monitor_memory: the heap of a 10,000-row monitor
#   nb_sync              --bench nb_sync: Northbound first sync and one update vs ovn-nbctl
#   agent_whole_cluster  --bench agent_whole -- 10000 1000 cluster: the release binary against
#                        the Kubernetes API test server (with ovn-northd, and with it stopped)
#   agent_whole_file     --bench agent_whole -- 10000 200 file json: the same from a file
#   nb_scale_2000        --bench nb_scale -- 2000 10000 template,per-node
#   nb_scale_100         --bench nb_scale -- 100 10000 template,per-node (per-node rows fit)
#   failover             --bench failover: L2 failover on the real-packet testbed (needs root)
#   bgp                  --bench bgp: BGP through FRR on the real-packet testbed (needs root)
#   membership_sim       --bench membership_sim: the membership at 2,000 simulated nodes
#   ipam_alloc           --bench ipam_alloc: allocating addresses for 10,000 Services
#   frr_k8s              --bench frr_k8s: a Cluster VIP change in frr-k8s mode at 2,000 nodes
#
# What it does, per benchmark: runs it, prints its output and saves it to
# target/bench/NAME.txt, then replaces what stands between the lines
#   <!-- bench:NAME begin -->
#   <!-- bench:NAME end -->
# in BENCHMARKS.md with a line naming the machine (cores, memory, kernel, Open vSwitch and OVN
# versions, date) and the output: lines of a markdown table as they are, everything else in a
# fenced block. Nothing outside the markers changes. A benchmark that prints nothing (failover
# without root says SKIPPED on stderr) leaves its block as it was. Compiler messages and
# progress go to stderr, on the terminal; a benchmark that fails stops the script (the blocks
# already written stay).
#
# The benchmarks start the daemons they measure against in temp dirs of their own
# (scripts/install-deps.sh installs them first; nothing system-wide is started). The whole set
# takes roughly an hour on a 2-core machine, most of it agent_whole (a fat-LTO build, then four
# modes) and failover (two 5-minute watches). Run it on an otherwise idle machine: every figure
# shares the cores with the daemons it measures.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo pipefail/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
}

benches=(
    "bundle_install|-p openflow --bench bundle_install"
    "agent_sync|--bench agent_sync"
    "nb_bench|-p ovsdb --bench nb_bench"
    "bulk_insert|-p ovsdb --bench bulk_insert"
    "monitor_memory|-p ovsdb --bench monitor_memory"
    "nb_sync|--bench nb_sync"
    "agent_whole_cluster|--bench agent_whole -- 10000 1000 cluster"
    "agent_whole_file|--bench agent_whole -- 10000 200 file json"
    "nb_scale_2000|--bench nb_scale -- 2000 10000 template,per-node"
    "nb_scale_100|--bench nb_scale -- 100 10000 template,per-node"
    "failover|--bench failover"
    "bgp|--bench bgp"
    "membership_sim|--bench membership_sim"
    "ipam_alloc|--bench ipam_alloc"
    "frr_k8s|--bench frr_k8s"
)

only=""
write=1
while [ $# -gt 0 ]; do
    case $1 in
        --only)
            [ $# -ge 2 ] || { echo "bench.sh: --only needs NAME[,NAME...]" >&2; exit 2; }
            only=$2
            shift 2
            ;;
        --only=*)
            only=${1#--only=}
            shift
            ;;
        --no-write)
            write=0
            shift
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "bench.sh: unknown argument '$1' (see --help)" >&2
            exit 2
            ;;
    esac
done

# WANT selects NAME when it is NAME or NAME is one of its variants WANT_*.
matches() {
    [ "$1" = "$2" ] || [ "${1#"$2"_}" != "$1" ]
}

selected() {
    local want
    [ -z "$only" ] && return 0
    for want in "${wanted[@]}"; do
        matches "$1" "$want" && return 0
    done
    return 1
}

wanted=()
if [ -n "$only" ]; then
    IFS=, read -r -a wanted <<<"$only"
    for want in "${wanted[@]}"; do
        found=0
        for b in "${benches[@]}"; do
            if matches "${b%%|*}" "$want"; then
                found=1
            fi
        done
        if [ "$found" = 0 ]; then
            echo "bench.sh: no benchmark named '$want' (see --help)" >&2
            exit 2
        fi
    done
fi

cd "$(dirname "$0")/.."
doc=BENCHMARKS.md
outdir=target/bench
mkdir -p "$outdir"
bash scripts/install-deps.sh

version_of() {
    # The version is the last word of the first line (`ovs-vswitchd (Open vSwitch) 3.1.0`).
    if command -v "$1" >/dev/null 2>&1; then
        "$1" --version 2>/dev/null | head -1 | awk '{print $NF}'
    else
        echo "not installed"
    fi
}

machine() {
    local cpu mem
    cpu=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
    mem=$(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
    printf '%s cores%s, %s, Linux %s, Open vSwitch %s, OVN %s, %s' \
        "$(nproc)" "${cpu:+ ($cpu)}" "$mem" "$(uname -r)" \
        "$(version_of ovs-vswitchd)" "$(version_of ovn-northd)" "$(date -u +%Y-%m-%d)"
}

# Replace the block between NAME's markers in DOC with the machine line and OUTPUT's text.
write_block() {
    python3 - "$doc" "$1" "$2" "$3" <<'PY'
import os
import re
import sys

doc, name, machine, output = sys.argv[1:5]
begin = f"<!-- bench:{name} begin -->"
end = f"<!-- bench:{name} end -->"
with open(doc, encoding="utf-8") as f:
    lines = f.read().split("\n")
starts = [i for i, l in enumerate(lines) if l.strip() == begin]
ends = [i for i, l in enumerate(lines) if l.strip() == end]
if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
    sys.exit(f"bench.sh: {doc} needs exactly one '{begin}' line and one '{end}' line after it")

with open(output, encoding="utf-8", errors="replace") as f:
    out = f.read().rstrip("\n").split("\n")

# The output in runs: lines of a markdown table as they are (a blank line closes a table), every
# other run in a fenced block whose fence is longer than any run of backticks in it.
runs = []  # [is_table, lines]
for line in out:
    if not line.strip():
        if runs:
            runs[-1][1].append(line)
        continue
    is_table = line.lstrip().startswith("|")
    if not runs or runs[-1][0] != is_table:
        runs.append([is_table, []])
    runs[-1][1].append(line)
body = ["", f"Machine: {machine}."]
for is_table, run in runs:
    while not run[-1].strip():
        run.pop()
    body.append("")
    if is_table:
        body.extend(run)
    else:
        longest = max((len(m) for l in run for m in re.findall(r"`+", l)), default=0)
        fence = "`" * max(3, longest + 1)
        body.extend([fence + "text", *run, fence])
body.append("")

new = lines[: starts[0] + 1] + body + lines[ends[0]:]
tmp = doc + ".tmp"
with open(tmp, "w", encoding="utf-8") as f:
    f.write("\n".join(new))
os.replace(tmp, doc)
PY
}

for b in "${benches[@]}"; do
    name=${b%%|*}
    selected "$name" || continue
    read -r -a args <<<"${b#*|}"
    out="$outdir/$name.txt"
    echo "== $name: cargo bench ${args[*]}" >&2
    if ! cargo bench "${args[@]}" | tee "$out"; then
        echo "bench.sh: $name failed; stopping (the blocks written so far stay)" >&2
        exit 1
    fi
    if [ "$write" = 0 ]; then
        continue
    fi
    if [ ! -s "$out" ]; then
        echo "bench.sh: $name printed nothing; its block in $doc stays as it was" >&2
        continue
    fi
    write_block "$name" "$(machine)" "$out"
    echo "bench.sh: $name written to $doc (output in $out)" >&2
done
