//! One-shot I/O against a database, for the CLI: the batched sync of `vipflow agent --once`,
//! `vipflow verify` and `vipflow check`.

use super::ensure;
use crate::plan::exclude::LogicalSwitchIpam;
use crate::plan::node_template::NodeRows;
use crate::plan::northbound::LbRow;
use crate::reconcile::northbound::nb_options;
use crate::reconcile::northbound::take_over;
use crate::reconcile::northbound::task::send;
use ovsdb::Client;
use ovsdb::ClientOptions;
use retry::SharedBackoff;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;
use vipflow_core::reconcile::northbound::DB;
use vipflow_core::reconcile::northbound::DesiredRows;
use vipflow_core::reconcile::northbound::Observed;
use vipflow_core::reconcile::northbound::Session;
use vipflow_core::reconcile::northbound::describe_drift;
use vipflow_core::reconcile::northbound::group;
use vipflow_core::reconcile::northbound::new_token;
use vipflow_core::reconcile::northbound::node_rows_for;
use vipflow_core::reconcile::northbound::snapshot_spec;
use vipflow_core::reconcile::northbound::template_vars;

/// Connect, read the current rows (one monitor snapshot, with the chassis's template values
/// when `templates`), and close.
pub(super) async fn snapshot(
    remotes: &str,
    templates: bool,
) -> Result<(Client, ovsdb::Monitor, Observed), ovsdb::Error> {
    let client = Client::connect(nb_options(
        ClientOptions::new(remotes, DB)?,
        Duration::from_millis(crate::config::DEFAULT_NB_TIMEOUT_MS),
    ))
    .await?;
    let monitor = client.monitor(snapshot_spec(templates)).await?;
    let observed = Observed::from_cache(&monitor.cache());
    Ok((client, monitor, observed))
}

/// How long an agent's start waits for the Northbound schema: the node's bridges are
/// programmed after it, and a database that accepts and then fails every session must not
/// hold them back.
pub const SCHEMA_WAIT: Duration = Duration::from_secs(2);

/// `mode` made definite for the database at `remotes`: [`NodeRows::Auto`] is template rows
/// where the schema has `Chassis_Template_Var` (OVN 22.12 and later), per-node rows where it
/// has not or the schema cannot be read within [`SCHEMA_WAIT`] (said at WARN; then until the
/// next start). Its dials go by `backoff`, the one the writer that follows uses
/// ([`peer_backoff`](super::peer_backoff)).
pub async fn resolve_node_rows(remotes: &str, mode: NodeRows, backoff: &SharedBackoff) -> NodeRows {
    if mode != NodeRows::Auto {
        return mode;
    }
    let schema = async {
        let mut opts = nb_options(
            ClientOptions::new(remotes, DB)?,
            Duration::from_millis(crate::config::DEFAULT_NB_TIMEOUT_MS),
        );
        opts.shared_backoff = Some(backoff.clone());
        Ok::<_, ovsdb::Error>(Client::connect(opts).await?.schema())
    };
    let schema = async {
        tokio::time::timeout(SCHEMA_WAIT, schema)
            .await
            .unwrap_or(Err(ovsdb::Error::Timeout(SCHEMA_WAIT)))
    };
    match schema.await {
        Ok(s) => {
            let mode = node_rows_for(&s);
            match mode {
                NodeRows::Template => {
                    tracing::info!(version = %s.version, "Northbound has Chassis_Template_Var: externalTrafficPolicy Local's node rows are templates (--node-rows auto)")
                }
                _ => {
                    tracing::info!(version = %s.version, "Northbound has no Chassis_Template_Var (OVN before 22.12): a node row per Service per node (--node-rows auto)")
                }
            }
            mode
        }
        Err(e) => {
            tracing::warn!(remotes, error = %e, "cannot read the Northbound schema: --node-rows auto writes a node row per Service per node until the next start");
            NodeRows::PerNode
        }
    }
}

/// One batched sync (`vipflow agent --once`) to `plan`, the rows as the running agent's
/// planner hands them to its writer: returns the number of operations written and the
/// attachment problems.
pub async fn sync_once(
    remotes: &str,
    plan: &DesiredRows,
) -> Result<(usize, Vec<String>), ovsdb::Error> {
    // A writer for this moment: take over (a running writer resumes on its next connection),
    // read, write the difference as a batch.
    let client = Client::connect(nb_options(
        ClientOptions::new(remotes, DB)?,
        Duration::from_millis(crate::config::DEFAULT_NB_TIMEOUT_MS),
    ))
    .await?;
    let token = new_token();
    take_over(&client, &token).await?;
    let monitor = client
        .monitor(snapshot_spec(plan.template_chassis.is_some()))
        .await?;
    let mut session = Session::new(Observed::from_cache(&monitor.cache()), Some(token));
    ensure::ensure_groups(&mut session, &client, plan).await?;
    ensure::ensure_planned(&mut session, &client, plan).await?;
    let changes = session.changes(plan);
    let ops = changes.iter().map(|c| c.ops).sum();
    send(&mut session, &client, monitor, plan, changes)
        .await
        .result?;
    Ok((ops, session.problems()))
}

/// Differences between the database and `plan`, one line each (`vipflow verify`): rows,
/// template values, vipflow's groups and `exclude_ips`.
pub async fn drift(remotes: &str, plan: &DesiredRows) -> Result<Vec<String>, ovsdb::Error> {
    let templates = plan.template_chassis.is_some();
    let (_client, monitor, observed) = snapshot(remotes, templates).await?;
    let rows: Vec<LbRow> = plan
        .rows
        .values()
        .flat_map(|rows| rows.iter().cloned())
        .collect();
    let mut lines = describe_drift(&observed, &monitor.cache(), &rows);
    if templates {
        lines.extend(template_vars::describe(&observed, &rows));
    }
    for g in plan.groups.iter() {
        lines.extend(group::describe(&observed, g));
    }
    if plan.exclude_ips {
        let switches: Vec<LogicalSwitchIpam> =
            observed.ipam.iter().map(|s| s.ipam.clone()).collect();
        let vips: BTreeSet<IpAddr> = plan.vips.iter().copied().collect();
        for ch in
            crate::plan::exclude::plan_ovn_with_pools(&vips, &plan.pool_ranges, &switches).changes
        {
            lines.push(format!(
                "~ Logical_Switch {}: other_config:exclude_ips should be {:?}",
                ch.name,
                ch.exclude_ips.unwrap_or_default()
            ));
        }
    }
    Ok(lines)
}

/// VIPs and pool addresses inside a logical switch's `other_config:subnet` that its current
/// `exclude_ips` does not cover (`vipflow check`).
pub async fn unexcluded(remotes: &str, exclude: &Exclude) -> Result<Vec<String>, ovsdb::Error> {
    use crate::plan::exclude::{RangeSet, gaps, ipam_span, parse_ovn_subnet};
    let (_client, _monitor, observed) = snapshot(remotes, false).await?;
    let mut out = Vec::new();
    for sw in &observed.ipam {
        let Some(Ok(net)) = sw.ipam.subnet.as_deref().map(parse_ovn_subnet) else {
            continue;
        };
        let (covered, _) = RangeSet::from_ovn_text(sw.ipam.exclude_ips.as_deref().unwrap_or(""));
        for vip in &exclude.vips {
            if let std::net::IpAddr::V4(v4) = vip
                && net.contains(v4)
                && !covered.contains(*vip)
            {
                out.push(format!(
                    "Logical_Switch {}: VIP {vip} is in subnet {net} but not in exclude_ips",
                    sw.ipam.name
                ));
            }
        }
        let (lo, hi) = ipam_span(&net);
        for &(a, b) in &exclude.pools {
            let open = gaps(&covered.v4, u32::from(a).max(lo), u32::from(b).min(hi));
            let count: u64 = open.iter().map(|&(s, e)| u64::from(e - s) + 1).sum();
            if let Some(&(first, _)) = open.first() {
                out.push(format!(
                    "Logical_Switch {}: {count} pool addresses from {} are in subnet {net} but not in exclude_ips",
                    sw.ipam.name,
                    std::net::Ipv4Addr::from(first)
                ));
            }
        }
    }
    Ok(out)
}

/// What `exclude_ips` must hold: every VIP, and every IPv4 pool range (inclusive).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclude {
    pub vips: BTreeSet<IpAddr>,
    pub pools: Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)>,
}
