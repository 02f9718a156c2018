#!/usr/bin/env bash
# Every headline figure of vipflow in one run, each beside what a user would otherwise run:
#
#   agent_sync   full flow sync vs `ovs-ofctl --bundle add-flows` (10k and 50k flows); one
#                Service change vs `ovs-ofctl --bundle replace-flows`; planning at 1k/10k
#   nb_sync      Northbound initial sync and one update vs `ovn-nbctl`
#   agent_whole  the release binary at 10,000 Services, cluster mode against the Kubernetes API
#                test server: event to bridge synced p50/p99, first sync, peak RSS, CPU seconds
#                per 1,000 changes (and file mode)
#   nb_scale     node-scoped rows at 2,000 nodes and 10,000 Services: per-node against template
#                rows, with ovn-northd's time beside
#
# Usage: scripts/bench.sh [OUT]   (OUT default: target/bench-report.md)
# Takes about 30 to 45 minutes on a 2-core machine, most of it building with fat LTO and the
# whole-agent runs. Each benchmark prints its own table with medians and ratios; the report
# keeps them in order, with the machine they ran on. BENCHMARKS.md says what each figure means.
set -euo pipefail

cd "$(dirname "$0")/.."
out=${1:-target/bench-report.md}
mkdir -p "$(dirname "$out")"
bash scripts/install-deps.sh

{
    echo "# vipflow benchmarks, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo
    echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
    echo "$(ovs-vswitchd --version | head -1); $(ovn-northd --version | head -1)"
} > "$out"

run() {
    local title=$1
    shift
    echo "== $title: cargo bench $*" >&2
    {
        echo
        echo "## $title"
        echo
        echo '```'
        cargo bench "$@" 2>/dev/null
        echo '```'
    } >> "$out"
}

run "Flows: full sync and one Service change (agent_sync)" --bench agent_sync
run "Northbound: initial sync and one update (nb_sync)" --bench nb_sync
run "The whole agent at 10,000 Services, cluster mode (agent_whole)" --bench agent_whole -- 10000 1000 cluster
run "The whole agent at 10,000 Services, file mode (agent_whole)" --bench agent_whole -- 10000 200 file
run "Node-scoped rows at 2,000 nodes (nb_scale)" --bench nb_scale -- 2000 10000 template,per-node
run "Per-node rows where they fit, for their timings (nb_scale)" --bench nb_scale -- 100 10000 template,per-node

cat "$out"
echo "report: $out" >&2
