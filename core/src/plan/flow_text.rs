//! A planned flow as `ovs-ofctl add-flow` text with port names, for `vipflow plan`.

use super::flows::{PlannedAction, PlannedFlow, PortRef};
use crate::announce::l2;
use crate::config::{BridgeConfig, format_mac};
use std::fmt;

impl PlannedFlow {
    /// Text in `ovs-ofctl add-flow` syntax with port names, for `vipflow plan`. A port left to
    /// be found in the OVS database shows as `<bridge uplink>` / `<bridge patch>`.
    pub fn display<'a>(&'a self, bridge: &'a BridgeConfig) -> PlannedFlowText<'a> {
        PlannedFlowText { flow: self, bridge }
    }
}

pub struct PlannedFlowText<'a> {
    flow: &'a PlannedFlow,
    bridge: &'a BridgeConfig,
}

impl fmt::Display for PlannedFlowText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (fl, b) = (self.flow, self.bridge);
        let name = |p: PortRef| match p {
            PortRef::Uplink => b
                .uplink
                .clone()
                .unwrap_or_else(|| format!("<{} uplink>", b.name)),
            PortRef::Patch => b
                .patch
                .clone()
                .unwrap_or_else(|| format!("<{} patch>", b.name)),
            PortRef::Local => "LOCAL".into(),
        };
        write!(
            f,
            "cookie={:#x},table={},priority={},in_port={}",
            fl.cookie,
            fl.table,
            fl.priority,
            name(fl.in_port)
        )?;
        if fl.dl_src_bridge {
            match &b.bridge_mac {
                Some(m) => write!(f, ",dl_src={}", format_mac(m))?,
                None => write!(f, ",dl_src=<{} mac>", b.name)?,
            }
        }
        let rest = fl.match_.to_string();
        if !rest.is_empty() {
            write!(f, ",{rest}")?;
        }
        let mac = match &b.bridge_mac {
            Some(m) => format_mac(m),
            None => format!("<{} mac>", b.name),
        };
        let acts: Vec<String> = fl
            .actions
            .iter()
            .map(|a| match a {
                PlannedAction::Output(PortRef::Local) => "LOCAL".to_string(),
                PlannedAction::Output(p) => format!("output:{}", name(*p)),
                PlannedAction::PopVlan => "pop_vlan".into(),
                PlannedAction::SetEthDst(m) => format!("mod_dl_dst:{}", format_mac(m)),
                PlannedAction::AnswerArp(vip) => l2::arp_answer_actions_text(*vip, &mac),
                PlannedAction::AnswerNd(vip) => l2::nd_answer_actions_text(*vip, &mac, fl.table),
                PlannedAction::AdvertNd => l2::nd_advert_actions_text(&mac),
            })
            .collect();
        if acts.is_empty() {
            return f.write_str(" actions=drop");
        }
        write!(f, " actions={}", acts.join(","))
    }
}
