//! The churn invariant, read with the operator's tools: the flows on br-ex, vipflow's
//! Load_Balancer rows and the pod switch's `exclude_ips` equal the plan of the current objects,
//! and nothing foreign changed.

use crate::common::expect::{
    NbRow, default_resolved, expected_flows, expected_rows, nbctl_lbs, ofctl_ours, ours_rows,
};
use crate::world::POD_SUBNET;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use testkit::{Sandbox, our_cookie};
use vipflow::config::Config;
use vipflow::model::Model;
use vipflow::plan::flows::Resolved;

/// Flows and a row that are not vipflow's: they must survive every change.
const FOREIGN_FLOWS: [&str; 2] = [
    "cookie=0x1234,priority=600,in_port=1,arp,arp_op=1,arp_tpa=172.19.0.100 actions=drop",
    "cookie=0x7f1e000000000001,table=1,priority=10,ip actions=NORMAL",
];
/// The user's own exclusions, odd spacing on purpose: kept byte for byte.
const USER_EXCLUDE: &str = "172.19.0.2  172.19.0.10..172.19.0.11";

/// What was there before vipflow started, to compare against at every check.
pub struct Baseline {
    foreign_flows: BTreeSet<String>,
    foreign_rows: Vec<NbRow>,
    pub resolved: Resolved,
}

fn foreign_flow_lines(sb: &Sandbox) -> BTreeSet<String> {
    let ours = our_cookie();
    sb.ofctl(&["--no-stats", "dump-flows", "br-ex"])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.starts_with(&ours))
        .collect()
}

fn foreign_rows(sb: &Sandbox) -> Vec<NbRow> {
    nbctl_lbs(sb)
        .into_iter()
        .filter(|r| !r.4.contains_key("vipflow.io/owner"))
        .collect()
}

fn put_foreign_flows(sb: &Sandbox) {
    for f in FOREIGN_FLOWS {
        sb.ofctl(&["add-flow", "br-ex", f]);
    }
}

/// A foreign Load_Balancer row and a pod switch with the user's exclusions.
fn put_foreign_northbound(sb: &Sandbox) {
    sb.nbctl(&["lb-add", "foreign-lb", "192.0.2.1:80", "10.0.0.1:80", "tcp"]);
    sb.nbctl(&["ls-add", "pods"]);
    sb.nbctl(&[
        "set",
        "Logical_Switch",
        "pods",
        &format!("other_config:subnet={POD_SUBNET}"),
        &format!("other_config:exclude_ips=\"{USER_EXCLUDE}\""),
    ]);
}

impl Baseline {
    /// Foreign flows and a foreign row, and a pod switch with the user's exclusions, put in
    /// place before the agent starts.
    pub fn prepare(sb: &Sandbox, nb: bool) -> Baseline {
        put_foreign_flows(sb);
        if nb {
            put_foreign_northbound(sb);
        }
        Baseline {
            foreign_flows: foreign_flow_lines(sb),
            foreign_rows: if nb { foreign_rows(sb) } else { Vec::new() },
            resolved: default_resolved(),
        }
    }
}

/// What differs from the invariant for the objects in `text`; empty when it holds.
pub fn violations(
    sb: &Sandbox,
    cfg: &Config,
    text: &str,
    base: &Baseline,
    nb: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let b = &cfg.bridges[0];
    let want = expected_flows(cfg, b, text, &base.resolved);
    let have = ofctl_ours(sb, &b.name);
    if have != want {
        let missing: Vec<_> = want.difference(&have).take(3).collect();
        let extra: Vec<_> = have.difference(&want).take(3).collect();
        out.push(format!(
            "flows: {} live, {} planned; missing {} e.g. {missing:?}; extra {} e.g. {extra:?}",
            have.len(),
            want.len(),
            want.difference(&have).count(),
            have.difference(&want).count()
        ));
    }
    if foreign_flow_lines(sb) != base.foreign_flows {
        out.push(format!(
            "foreign flows changed: {:?}",
            foreign_flow_lines(sb)
                .symmetric_difference(&base.foreign_flows)
                .collect::<Vec<_>>()
        ));
    }
    if !nb {
        return out;
    }
    let want = expected_rows(cfg, text);
    let have = ours_rows(sb);
    if have != want {
        let differ: Vec<_> = want
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(v))
            .map(|(k, _)| k)
            .chain(have.keys().filter(|k| !want.contains_key(*k)))
            .take(3)
            .collect();
        out.push(format!(
            "rows: {} live, {} planned; differing e.g. {differ:?}",
            have.len(),
            want.len()
        ));
    }
    if foreign_rows(sb) != base.foreign_rows {
        out.push("the foreign Load_Balancer row changed".into());
    }
    // exclude_ips: vipflow's IPv4 VIPs inside the subnet in front, the user's text behind.
    let loaded = vipflow::decode::parse(text).unwrap();
    let model = Model::build(
        &loaded.objects,
        &vipflow::model::ModelOptions::from_config(cfg),
    );
    let subnet: ipnet::Ipv4Net = POD_SUBNET.parse().unwrap();
    let user: BTreeSet<IpAddr> = ["172.19.0.2", "172.19.0.10", "172.19.0.11"]
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    let want: BTreeSet<String> = model
        .vips()
        .keys()
        .filter(|ip| matches!(ip, IpAddr::V4(a) if subnet.contains(a)) && !user.contains(ip))
        .map(ToString::to_string)
        .collect();
    let raw = sb.nbctl(&["get", "Logical_Switch", "pods", "other_config:exclude_ips"]);
    let text = raw.trim().trim_matches('"');
    match text.strip_suffix(USER_EXCLUDE) {
        None => out.push(format!("exclude_ips lost the user's text: {text:?}")),
        Some(ours) => {
            let have: BTreeSet<String> = ours.split_whitespace().map(String::from).collect();
            if have != want {
                out.push(format!(
                    "exclude_ips: vipflow's part {have:?}, planned {want:?}"
                ));
            }
        }
    }
    out
}

/// Poll the invariant until it holds, for at most `limit`: how long it took, or what was still
/// wrong.
pub async fn converged(
    sb: &Sandbox,
    cfg: &Config,
    text: &str,
    base: &Baseline,
    nb: bool,
    limit: Duration,
) -> Result<Duration, Vec<String>> {
    let start = Instant::now();
    loop {
        let bad = violations(sb, cfg, text, base, nb);
        if bad.is_empty() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            return Err(bad);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

impl Baseline {
    /// Put the foreign flows back, as their owner would after ovs-vswitchd lost them.
    pub fn restore_foreign_flows(&self, sb: &Sandbox) {
        put_foreign_flows(sb);
    }

    /// Put the foreign row and the pod switch back, as their owners would on a new database;
    /// the foreign row gets a new UUID, nothing else differs.
    pub fn restore_northbound(&mut self, sb: &Sandbox) {
        put_foreign_northbound(sb);
        self.foreign_rows = foreign_rows(sb);
    }
}
