//! What vipflow should have programmed, as the operator's tools print it: flows as
//! `ovs-ofctl dump-flows --no-stats` lines, Load_Balancer rows as `ovn-nbctl list` shows them.
//! The expectation is the planner's output for a file's objects; the live side is read with
//! the OVS/OVN tools, never through vipflow's own connections.

use openflow::FlowStats;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use testkit::Sandbox;
use vipflow::config::{BridgeConfig, Config};
use vipflow::model::Model;
use vipflow::plan::flows::{PlanInput, Resolved, plan};

/// br-ex's MAC in the sandbox (`scripts/sandbox.sh`).
pub const BR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// The sandbox's br-ex: eth0 is port 1, the patch port 2, no gateway-router MAC.
pub fn default_resolved() -> Resolved {
    Resolved {
        uplink: 1,
        patch: 2,
        bridge_mac: BR_MAC,
        steer_dst: None,
    }
}

/// Our flows as ovs-ofctl shows them (`--no-stats`), one trimmed line each.
pub fn ofctl_ours(sb: &Sandbox, bridge: &str) -> BTreeSet<String> {
    let ours = testkit::our_cookie();
    sb.ofctl(&["--no-stats", "dump-flows", bridge])
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| l.starts_with(&ours))
        .collect()
}

/// The plan for `yaml` rendered exactly as ovs-ofctl prints flows.
pub fn expected_flows(
    cfg: &Config,
    b: &BridgeConfig,
    yaml: &str,
    r: &Resolved,
) -> BTreeSet<String> {
    let loaded = vipflow::decode::parse(yaml).unwrap();
    let model = Model::build(
        &loaded.objects,
        &vipflow::model::ModelOptions::from_config(cfg),
    );
    plan(
        &model,
        &PlanInput {
            bridge: b,
            cookie_prefix: cfg.cookie_prefix,
        },
    )
    .iter()
    .map(|f| {
        let fm = f.resolve(r);
        let fs = FlowStats {
            table_id: fm.table_id,
            priority: fm.priority,
            cookie: fm.cookie,
            match_: fm.match_,
            instructions: fm.instructions,
            ..FlowStats::default()
        };
        fs.dump_line(false).to_string().trim().to_string()
    })
    .collect()
}

/// An OVSDB JSON map (`["map", [[k, v], ...]]`) as strings.
pub fn json_map(j: &Json) -> BTreeMap<String, String> {
    j.get(1)
        .and_then(Json::as_array)
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|p| {
                    Some((
                        p.get(0)?.as_str()?.to_string(),
                        p.get(1)?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Every Load_Balancer row as ovn-nbctl reports it: name -> (protocol, vips, options, external_ids).
pub type LbView = BTreeMap<
    String,
    (
        String,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
        BTreeMap<String, String>,
    ),
>;

/// (name, protocol, vips, options, external_ids) of one row.
pub type NbRow = (
    String,
    String,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
    BTreeMap<String, String>,
);

pub fn nbctl_lbs(sb: &Sandbox) -> Vec<NbRow> {
    let out = sb.nbctl(&[
        "--format=json",
        "--columns=name,protocol,vips,options,external_ids",
        "list",
        "Load_Balancer",
    ]);
    let j: Json = serde_json::from_str(&out).unwrap();
    j["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let proto = match &r[1] {
                Json::String(s) => s.clone(),
                _ => "tcp".into(), // empty set: OVN's default
            };
            (
                r[0].as_str().unwrap().to_string(),
                proto,
                json_map(&r[2]),
                json_map(&r[3]),
                json_map(&r[4]),
            )
        })
        .collect()
}

/// vipflow's rows (those with its owner key), none twice.
pub fn ours_rows(sb: &Sandbox) -> LbView {
    let rows = nbctl_lbs(sb);
    let mut m = LbView::new();
    for (name, proto, vips, opts, ext) in rows {
        if ext.contains_key("vipflow.io/owner") {
            assert!(
                m.insert(name.clone(), (proto, vips, opts, ext)).is_none(),
                "duplicate row {name}"
            );
        }
    }
    m
}

/// The planned rows for `yaml`.
pub fn expected_rows(cfg: &Config, yaml: &str) -> LbView {
    let loaded = vipflow::decode::parse(yaml).unwrap();
    let model = Model::build(
        &loaded.objects,
        &vipflow::model::ModelOptions::from_config(cfg),
    );
    vipflow::plan::northbound::plan(&model, &cfg.northbound)
        .into_iter()
        .map(|r| {
            (
                r.name.clone(),
                (
                    r.key.protocol.as_str().to_string(),
                    r.vips.to_btree(),
                    r.options.to_btree(),
                    r.external_ids.to_btree(),
                ),
            )
        })
        .collect()
}
