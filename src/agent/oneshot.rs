//! The one-shot commands: one full sync of every bridge (`vipflow agent --once`), the
//! comparison with the plan (`vipflow verify`) and the IPAM check (`vipflow check`). They live
//! beside the agent because they plan from the same configuration with the same helpers; they
//! build the model once and connect, compare or write once.

use crate::agent::AgentError;
use crate::agent::report::kubeovn_subnets;
use crate::agent::router_mac;
use crate::agent::settings;
use crate::config::BridgeConfig;
use crate::config::Config;
use crate::model::Objects;
use crate::plan::flows::PlannedFlow;
use crate::plan::planner::Planner;
use crate::reconcile::bridge;
use crate::reconcile::bridge::FlowSet;
use crate::reconcile::bridge::Ports;
use crate::reconcile::northbound as nb;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
/// Result of one sync of one bridge.
#[derive(Debug, Clone)]
pub struct SyncReport {
    pub bridge: String,
    pub changes: usize,
    pub flows: usize,
    pub skipped: Vec<String>,
}

/// Connect to a bridge, learn its ports (PORT_DESC and the OVS database, `db`) and read our
/// flows.
async fn observe(
    cfg: &Config,
    b: &BridgeConfig,
    db: &vipflow_core::reconcile::bridge::ports::OvsDb,
) -> Result<(openflow::Connection, Ports, FlowSet), AgentError> {
    let s = settings(cfg, b);
    let err = |source| AgentError::OpenFlow {
        bridge: b.name.clone(),
        source,
    };
    let (conn, _events) = openflow::Connection::connect(&s.target, s.openflow.clone())
        .await
        .map_err(err)?;
    let mut ports = Ports::from_desc(&conn.port_desc().await.map_err(err)?);
    ports.db = db.clone();
    let flows = bridge::read_flows(&conn, s.cookie_base, s.cookie_mask)
        .await
        .map_err(err)?;
    Ok((conn, ports, flows))
}

/// The roles of a bridge for a one-shot command. A port that cannot be found or is not on the
/// bridge is an error (the other problems are logged): one sync must not pass for a success
/// with no flows.
fn one_shot_roles(
    b: &BridgeConfig,
    ports: &Ports,
    router_mac: Option<openflow::oxm::MacAddr>,
) -> Result<bridge::Roles, AgentError> {
    let roles = bridge::Roles::of(b, ports, router_mac);
    if let Some(e) = [&roles.uplink, &roles.patch]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
        .find(|e| e.is_problem())
    {
        return Err(AgentError::Ports {
            bridge: b.name.clone(),
            reason: e.to_string(),
        });
    }
    for p in roles.problems(b, ports) {
        tracing::warn!(bridge = %b.name, problem = %p, "bridge problem");
    }
    Ok(roles)
}

/// The plan every one-shot command acts on: the running agent's own planner, updated once
/// with the objects, so that what `plan` prints, `verify` compares and `--once` writes is what
/// the agent holds (answer flows, template values and vipflow's groups included). Without a
/// membership an announcing bridge's owners are placed over the objects' Ready Nodes, as the
/// agent places them; with one, the membership decides and the one-shot commands cannot judge
/// ownership ([`OneShotPlan::ownership_unknown`]).
pub struct OneShotPlan {
    pub planner: Planner,
    pub plans: crate::plan::planner::Plans,
    /// Announcing bridges' owners come from the membership, which a one-shot command does
    /// not run: their answer flows are neither compared nor written.
    pub ownership_unknown: bool,
}

/// Plan `objects` as the running agent does; with `rows`, the Northbound rows too whatever
/// `--nb-remote` says (`vipflow plan` prints them without a database).
pub fn plan_once(cfg: &Config, objects: &Objects, rows: bool) -> OneShotPlan {
    let mut planner = Planner::for_config_with_rows(cfg, rows || cfg.nb_remote.is_some());
    let plans = planner.update(objects);
    OneShotPlan {
        planner,
        plans,
        ownership_unknown: cfg.membership.key_file.is_some()
            && crate::announce::Announcing::of(cfg).any(),
    }
}

impl OneShotPlan {
    /// Bridge `i`'s planned flows (config order), sorted by key; without the answer flows when
    /// ownership is unknown.
    pub fn flows(&self, i: usize) -> Vec<PlannedFlow> {
        let Some(b) = self.plans.bridges.get(i) else {
            return Vec::new();
        };
        b.flows
            .iter()
            .filter(|k| !(self.ownership_unknown && k.is_answer()))
            .map(|k| b.maker.flow(k))
            .collect()
    }

    /// The rows as the running agent hands them to its Northbound writer.
    pub fn rows(&self, cfg: &Config, objects: &Objects) -> Option<nb::DesiredRows> {
        let rows = self.plans.northbound.as_ref()?;
        let mut d = nb::DesiredRows::from_rows(1, rows, cfg.northbound.exclude_ips);
        d.pool_ranges = Arc::new(pool_v4_ranges(objects));
        d.delta = None;
        Some(d)
    }

    /// What this node's FRR is to hold, when it speaks BGP (`bgp.frr-socket-dir`): its
    /// configuration (`None`: no peer selects it) and what was left out of it, and what it
    /// advertises and why. The running agent advertises each prefix once its bridges carry it.
    pub fn bgp(&self, cfg: &Config, objects: &Objects) -> Option<OneShotBgp> {
        let node = self.plans.bgp.clone()?;
        let (config, mut problems) = crate::bgp::frr_config::for_node(objects, &cfg.node_name);
        // frr-k8s mode: the objects the agents write instead (this node's with every Local
        // VIP the plan wants; the running agent adds each once its bridges carry it).
        let frr_k8s = self.plans.frr_k8s_pools.clone().map(|pools| {
            let (own, found) = crate::frrk8s::shared::local_configuration(
                objects,
                &cfg.node_name,
                &node.local,
                &cfg.bgp.frr_k8s_namespace,
            );
            for f in found {
                if !problems.contains(&f) {
                    problems.push(f);
                }
            }
            OneShotFrrK8s { pools, own }
        });
        Some(OneShotBgp {
            config,
            problems,
            node,
            frr_k8s,
        })
    }

    /// Every VIP of the plan.
    pub fn vips(&self) -> BTreeSet<std::net::IpAddr> {
        self.planner.services().vips().into_iter().collect()
    }

    /// Whether the flow `id` on bridge `i` is an answer flow (made from an answer key): left
    /// alone when ownership is unknown.
    fn is_answer_flow(&self, i: usize, roles: &bridge::Roles, id: &bridge::FlowId) -> bool {
        let Some(b) = self.plans.bridges.get(i) else {
            return false;
        };
        crate::plan::flows::FlowKey::candidates(&id.2)
            .into_iter()
            .filter(|k| k.is_answer())
            .any(|k| {
                roles
                    .resolve(&b.maker.flow(&k))
                    .is_ok_and(|(made, _)| made == *id)
            })
    }
}

/// What the node's FRR is to hold after one plan ([`OneShotPlan::bgp`]).
#[derive(Debug, Clone)]
pub struct OneShotBgp {
    pub config: Option<String>,
    pub problems: Vec<crate::bgp::frr_config::FrrConfigProblem>,
    pub node: crate::plan::bgp_node::NodeBgp,
    /// frr-k8s mode (`bgp.frr-k8s` on): the objects written instead of FRR's configuration.
    pub frr_k8s: Option<OneShotFrrK8s>,
}

/// The `FRRConfiguration`s frr-k8s mode writes after one plan.
#[derive(Debug, Clone)]
pub struct OneShotFrrK8s {
    /// The shared objects, written by the elected agent.
    pub pools: crate::plan::planner::FrrK8sPools,
    /// This node's own object (its Local VIPs), written by its agent.
    pub own: Option<crate::frrk8s::objects::FrrConfiguration>,
}

/// The node's FRR, as `bgp.frr-socket-dir` and `bgp.vtysh` name it.
pub fn vtysh_of(cfg: &Config) -> Option<crate::reconcile::frr::Vtysh> {
    Some(
        crate::reconcile::frr::Vtysh::new(cfg.bgp.frr_socket_dir.clone()?)
            .with_program(cfg.bgp.vtysh.clone()),
    )
}

/// Whether the node's FRR is frr-k8s's (`--frr-k8s on`). The one-shot commands then leave
/// it alone, as the agent does outside cluster mode: what it advertises comes from the
/// `FRRConfiguration` objects, which only the agents in cluster mode write.
pub fn frr_is_frr_k8s(cfg: &Config) -> bool {
    cfg.bgp.frr_k8s == crate::config::FrrK8sMode::On
}

/// Bring the node's FRR to the plan once (`vipflow agent --once`, after the bridges: they
/// carry what it advertises). `None` when the node speaks no BGP, or its FRR is frr-k8s's
/// ([`frr_is_frr_k8s`]).
pub async fn sync_frr_once(
    cfg: &Config,
    objects: &Objects,
    one: &OneShotPlan,
) -> Result<Option<crate::reconcile::frr::FrrOnce>, AgentError> {
    if frr_is_frr_k8s(cfg) {
        return Ok(None);
    }
    let (Some(vtysh), Some(bgp)) = (vtysh_of(cfg), one.bgp(cfg, objects)) else {
        return Ok(None);
    };
    crate::reconcile::frr::run_once(&vtysh, bgp.config, bgp.node.prefixes.as_ref().clone())
        .await
        .map(Some)
        .map_err(AgentError::Frr)
}

/// How the node's FRR differs from the plan (`vipflow verify`): a prefix planned and not
/// originated (`+`), originated and not planned (`-`), and a BGP instance of another AS or
/// none. `None` when the node speaks no BGP, or its FRR is frr-k8s's ([`frr_is_frr_k8s`]).
pub async fn verify_frr(
    cfg: &Config,
    objects: &Objects,
) -> Result<Option<Vec<String>>, AgentError> {
    if frr_is_frr_k8s(cfg) {
        return Ok(None);
    }
    let one = plan_once(cfg, objects, false);
    let (Some(vtysh), Some(bgp)) = (vtysh_of(cfg), one.bgp(cfg, objects)) else {
        return Ok(None);
    };
    let table = vtysh.bgp_table().await.map_err(AgentError::Frr)?;
    let mut out = Vec::new();
    let asn = bgp
        .config
        .as_deref()
        .and_then(crate::bgp::frr_config::bgp_asn);
    if table.local_as != asn {
        out.push(format!(
            "~ BGP instance: FRR has {}, planned {}",
            table.local_as.map_or("none".into(), |a| format!("AS {a}")),
            asn.map_or("none".into(), |a| format!("AS {a}"))
        ));
    }
    let planned = if asn.is_some() {
        bgp.node.prefixes.as_ref().clone()
    } else {
        BTreeSet::new()
    };
    for p in planned.difference(&table.originated) {
        out.push(format!("+ network {p}"));
    }
    for p in table.originated.difference(&planned) {
        out.push(format!("- network {p}"));
    }
    Ok(Some(out))
}

/// One full sync of every bridge to `objects` (`vipflow agent --once`).
pub async fn sync_once(cfg: &Config, objects: &Objects) -> Result<Vec<SyncReport>, AgentError> {
    sync_plan(cfg, objects, &plan_once(cfg, objects, false)).await
}

/// [`sync_once`] to a plan made with [`plan_once`].
pub async fn sync_plan(
    cfg: &Config,
    objects: &Objects,
    plan: &OneShotPlan,
) -> Result<Vec<SyncReport>, AgentError> {
    if plan.ownership_unknown {
        tracing::warn!(
            "the membership decides which node answers for each VIP: --once leaves the answer flows as they are"
        );
    }
    let db = crate::reconcile::ovs::read(&cfg.ovs_db()).await;
    let router_mac = router_mac(cfg, objects);
    let mut reports = Vec::new();
    for (i, b) in cfg.bridges.iter().enumerate() {
        let (conn, ports, observed) = observe(cfg, b, &db).await?;
        let roles = one_shot_roles(b, &ports, router_mac)?;
        let (mut want, mut skipped) = bridge::resolve_plan(&plan.flows(i), &roles);
        if plan.ownership_unknown {
            for (id, body) in &observed {
                if plan.is_answer_flow(i, &roles, id) {
                    want.insert(id.clone(), body.clone());
                }
            }
        }
        let msgs = bridge::diff(&observed, &want);
        let changes = msgs.len();
        let rejected =
            bridge::apply_bundle(&conn, msgs)
                .await
                .map_err(|source| AgentError::OpenFlow {
                    bridge: b.name.clone(),
                    source,
                })?;
        skipped.extend(rejected);
        reports.push(SyncReport {
            bridge: b.name.clone(),
            changes,
            flows: want.len(),
            skipped,
        });
        conn.close();
    }
    if let Some(remotes) = &cfg.nb_remote {
        // Never an empty plan in place of a missing one: that would delete every row.
        let rows = plan.rows(cfg, objects).ok_or(AgentError::NoRows)?;
        let (changes, skipped) =
            nb::sync_once(remotes, &rows)
                .await
                .map_err(|source| AgentError::Northbound {
                    remotes: remotes.clone(),
                    source: Box::new(source),
                })?;
        reports.push(SyncReport {
            bridge: "northbound".into(),
            changes,
            flows: rows.row_count,
            skipped,
        });
    }
    Ok(reports)
}

/// Northbound drift lines (empty when in sync); `None` when no NB database is configured.
pub async fn verify_northbound(
    cfg: &Config,
    objects: &Objects,
) -> Result<Option<Vec<String>>, AgentError> {
    let Some(remotes) = &cfg.nb_remote else {
        return Ok(None);
    };
    let rows = plan_once(cfg, objects, true)
        .rows(cfg, objects)
        .ok_or(AgentError::NoRows)?;
    nb::drift(remotes, &rows)
        .await
        .map(Some)
        .map_err(|source| AgentError::Northbound {
            remotes: remotes.clone(),
            source: Box::new(source),
        })
}

/// Differences between a bridge's flows and the plan.
#[derive(Debug, Clone, Default)]
pub struct Drift {
    pub bridge: String,
    /// Planned and absent on the switch, as ovs-ofctl flow text.
    pub missing: Vec<String>,
    /// Ours on the switch and not planned.
    pub extra: Vec<String>,
    /// On the switch with the planned table, priority and match but other actions or cookie:
    /// the switch's flow, then the planned one.
    pub changed: Vec<(String, String)>,
    pub skipped: Vec<String>,
    /// The membership decides the owners: answer flows were not compared.
    pub ownership_unknown: bool,
}

impl Drift {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.changed.is_empty()
    }
}

/// Compare every bridge with the plan (`vipflow verify`). Flows are compared in the form the
/// switch stores them ([`openflow::instruction::canonical`]), so a flow equal on the switch is
/// never reported.
pub async fn verify(cfg: &Config, objects: &Objects) -> Result<Vec<Drift>, AgentError> {
    let plan = plan_once(cfg, objects, false);
    let db = crate::reconcile::ovs::read(&cfg.ovs_db()).await;
    let router_mac = router_mac(cfg, objects);
    let announcing = crate::announce::Announcing::of(cfg);
    let mut out = Vec::new();
    for (i, b) in cfg.bridges.iter().enumerate() {
        let (conn, ports, mut observed) = observe(cfg, b, &db).await?;
        conn.close();
        let roles = one_shot_roles(b, &ports, router_mac)?;
        let (want, skipped) = bridge::resolve_plan(&plan.flows(i), &roles);
        let unknown = plan.ownership_unknown && announcing.bridge(&b.name);
        if unknown {
            observed.retain(|id, _| !plan.is_answer_flow(i, &roles, id));
        }
        let text = |((t, p, m), body): (&bridge::FlowId, &bridge::FlowBody)| {
            openflow::FlowMod::add(*t, *p, body.cookie, m.clone(), body.instructions.clone())
                .to_string()
        };
        let missing = want
            .iter()
            .filter(|(id, _)| !observed.contains_key(*id))
            .map(text)
            .collect();
        let extra = observed
            .iter()
            .filter(|(id, _)| !want.contains_key(*id))
            .map(text)
            .collect();
        let changed = want
            .iter()
            .filter_map(|(id, body)| {
                let have = observed.get(id).filter(|have| *have != body)?;
                Some((text((id, have)), text((id, body))))
            })
            .collect();
        out.push(Drift {
            bridge: b.name.clone(),
            missing,
            extra,
            changed,
            skipped,
            ownership_unknown: unknown,
        });
    }
    Ok(out)
}

/// Every address range of the objects' pools (a pool with a bad entry has none: it hands
/// nothing out).
pub fn pool_ranges(objects: &Objects) -> Vec<crate::plan::exclude::PoolRange> {
    crate::ipam::pool::pool_ranges(objects.pools.iter().map(|p| p.to_spec()))
}

/// What the elected agent would allocate from the objects file's VipPools (`vipflow plan`):
/// one line per LoadBalancer Service it would serve, its addresses and their pools, or why it
/// would get none. Empty when the file has no pools. The file is read again for the Services
/// as written (the planner keeps only what flows and rows need).
pub fn plan_allocations(cfg: &Config, objects: &Objects) -> Result<Vec<String>, AgentError> {
    use crate::ipam::controller::{Allocations, SeenService};
    use crate::model::ServiceKey;
    use k8s_openapi::api::core::v1 as corev1;
    use serde::Deserialize;
    if objects.pools.is_empty() {
        return Ok(Vec::new());
    }
    let path = objects_path(cfg)?;
    let text = crate::source::file::read_bounded(&path, cfg.objects_max_bytes)?;
    let mut services = Vec::new();
    let mut namespaces: std::collections::HashMap<String, BTreeMap<String, String>> =
        Default::default();
    let mut take = |v: serde_json::Value| match v["kind"].as_str() {
        Some("Service") => {
            if let Ok(s) = serde_json::from_value::<corev1::Service>(v) {
                let key = ServiceKey::new(
                    s.metadata.namespace.as_deref().unwrap_or("default"),
                    s.metadata.name.as_deref().unwrap_or_default(),
                );
                match crate::ipam::service::read(&s, cfg.load_balancer_class.as_deref()) {
                    Ok(Some(ask)) => services.push((key, SeenService::Ask(Box::new(ask)))),
                    Ok(None) => {}
                    Err(e) => services.push((
                        key,
                        SeenService::Bad {
                            error: e,
                            current: crate::ipam::service::status_ips(&s),
                            created: s.metadata.creation_timestamp.clone(),
                        },
                    )),
                }
            }
        }
        Some("Namespace") => {
            if let Ok(n) = serde_json::from_value::<corev1::Namespace>(v) {
                namespaces.insert(
                    n.metadata.name.unwrap_or_default(),
                    n.metadata.labels.unwrap_or_default(),
                );
            }
        }
        _ => {}
    };
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let Ok(v) = serde_json::Value::deserialize(doc) else {
            continue;
        };
        match v.get("items").and_then(|i| i.as_array()) {
            Some(items) => items.iter().cloned().for_each(&mut take),
            None => take(v),
        }
    }
    let pools: Vec<_> = objects.pools.iter().map(|p| p.to_spec()).collect();
    let (alloc, _) = Allocations::start(pools, namespaces, services);
    let mut said: BTreeMap<ServiceKey, Vec<String>> = BTreeMap::new();
    for e in alloc.statements() {
        said.entry(e.service.clone())
            .or_default()
            .push(e.note.to_string());
    }
    Ok(said
        .into_iter()
        .map(|(k, notes)| format!("{k}: {}", notes.join("; ")))
        .collect())
}

/// The IPv4 ranges of the objects' address pools, for `exclude_ips`.
pub(crate) fn pool_v4_ranges(objects: &Objects) -> Vec<(std::net::Ipv4Addr, std::net::Ipv4Addr)> {
    pool_ranges(objects)
        .into_iter()
        .filter_map(|p| match (p.range.start(), p.range.end()) {
            (std::net::IpAddr::V4(a), std::net::IpAddr::V4(b)) => Some((a, b)),
            _ => None,
        })
        .collect()
}

/// The objects path from the config, or an error.
pub fn objects_path(cfg: &Config) -> Result<PathBuf, AgentError> {
    cfg.objects.clone().ok_or(AgentError::NoObjects)
}

/// Every VIP that IPAM could hand to a pod (`vipflow check`): VIPs and pool ranges inside a
/// Kube-OVN Subnet's CIDR and not in its excludeIps, and (with a Northbound database) VIPs
/// inside a logical switch's subnet and not in its exclude_ips.
pub async fn check(cfg: &Config, objects: &Objects) -> Result<Vec<String>, AgentError> {
    use crate::plan::exclude::check_kubeovn_with_pools;
    let vips = plan_once(cfg, objects, false).vips();
    let subnets = kubeovn_subnets(objects);
    let pools = pool_ranges(objects);
    let mut out: Vec<String> = check_kubeovn_with_pools(&vips, &pools, &subnets)
        .iter()
        .map(|f| f.to_string())
        .collect();
    if let Some(remotes) = &cfg.nb_remote {
        let exclude = nb::Exclude {
            vips: vips.clone(),
            pools: pool_v4_ranges(objects),
        };
        let nb =
            nb::unexcluded(remotes, &exclude)
                .await
                .map_err(|source| AgentError::Northbound {
                    remotes: remotes.clone(),
                    source: Box::new(source),
                })?;
        out.extend(nb);
    }
    Ok(out)
}
