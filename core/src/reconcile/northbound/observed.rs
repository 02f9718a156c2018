//! What the writer knows of the database: vipflow's rows and the attachment targets, built
//! once from the monitor's cache and its queued events, and kept current from its events.

use crate::keys::EXCLUDE_IPS_KEY;
use crate::model::ServiceKey;
use crate::plan::exclude::LogicalSwitchIpam;
use crate::plan::northbound::LbKey;
use crate::plan::northbound::LbRow;
use crate::reconcile::northbound::CHASSIS_VARS;
use crate::reconcile::northbound::GROUP;
use crate::reconcile::northbound::LB;
use crate::reconcile::northbound::ROUTER;
use crate::reconcile::northbound::SWITCH;
use crate::reconcile::northbound::lb_row::DIGESTED;
use crate::reconcile::northbound::lb_row::map_of;
use crate::reconcile::northbound::lb_row::read_lb;
use crate::reconcile::northbound::lb_row::str_of;
use crate::reconcile::northbound::lb_row::str_pairs;
use crate::reconcile::northbound::lb_row::uuids_of;
use crate::reconcile::northbound::template_vars;
use crate::vec_set::VecSet;
use ovsdb::Cache;
use ovsdb::Event;
use ovsdb::Row;
use ovsdb::Uuid;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// One of our rows as the database has it: its identity and a digest of what a diff compares.
/// The writer's monitor keeps no more of the row than this ([`super::monitor_spec`]): a copy of
/// tens of thousands of rows would cost more than everything else the writer keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedLb {
    pub uuid: Uuid,
    pub key: LbKey,
    /// Its name is in the digest (a one-shot read's cache keeps the name itself).
    pub content: LbDigest,
    /// The template variables its VIPs name (a template row; empty for the others).
    pub vars: Vec<String>,
}

/// Two independent 64-bit hashes of the columns a diff compares (name, vips, options,
/// external_ids, ip_port_mappings): equal digests of different contents are practically
/// impossible, and a digest is all an observed row needs to keep of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbDigest(u64, u64);

impl LbDigest {
    /// The digest's two halves, to keep in a row ([`super::lb_row::lb_summary`]).
    pub fn parts(self) -> (u64, u64) {
        (self.0, self.1)
    }

    /// A digest from its two halves.
    pub fn from_parts(a: u64, b: u64) -> LbDigest {
        LbDigest(a, b)
    }

    /// `maps` in column order, each one's pairs in key order.
    fn of<'a, M, P>(name: &str, maps: M) -> LbDigest
    where
        M: IntoIterator<Item = P> + Clone,
        P: IntoIterator<Item = (&'a str, &'a str)>,
        P::IntoIter: Clone,
    {
        let hash = |seed: u8| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            seed.hash(&mut h);
            name.hash(&mut h);
            for m in maps.clone() {
                // Each map's length first: with each string ended by a byte UTF-8 never has,
                // no two different contents give the same input (a marker between maps could
                // be read as an empty key).
                let pairs = m.into_iter();
                pairs.clone().count().hash(&mut h);
                for (k, v) in pairs {
                    k.hash(&mut h);
                    v.hash(&mut h);
                }
            }
            h.finish()
        };
        LbDigest(hash(0), hash(1))
    }

    /// The digest of a planned row: its map columns in `lb_row::DIGESTED`'s order.
    pub fn planned(d: &LbRow) -> LbDigest {
        LbDigest::of(
            &d.name,
            [
                d.vips.iter(),
                d.options.iter(),
                d.external_ids.iter(),
                d.ip_port_mappings.iter(),
            ],
        )
    }

    /// The digest of a row as the database has it.
    pub fn observed(name: &str, row: &Row) -> LbDigest {
        LbDigest::of(name, DIGESTED.map(|c| str_pairs(row.get(c))))
    }
}

/// A logical switch's IPAM columns as observed.
#[derive(Debug, Clone)]
pub struct SwitchIpam {
    pub uuid: Uuid,
    pub ipam: LogicalSwitchIpam,
    pub other_config: BTreeMap<String, String>,
    pub external_ids: BTreeMap<String, String>,
}

/// A switch, router or group: its uuid, the load balancers and (switch, router) the groups it
/// holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    pub uuid: Uuid,
    pub lbs: BTreeSet<Uuid>,
    pub groups: BTreeSet<Uuid>,
}

/// What the diff needs of the database: our rows, indexed by Service, and the switches,
/// routers and groups.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub lbs: HashMap<Uuid, ObservedLb>,
    /// Each Service's rows (nearly always one or two).
    pub by_owner: HashMap<ServiceKey, VecSet<Uuid>>,
    /// Logical switches' IPAM settings: uuid, raw values, full other_config and external_ids.
    pub ipam: Vec<SwitchIpam>,
    pub groups: BTreeMap<String, Holder>,
    pub switches: BTreeMap<String, Holder>,
    pub routers: BTreeMap<String, Holder>,
    /// Each chassis's `Chassis_Template_Var` row (vipflow's variables of it), when template
    /// rows are in use (the table is monitored).
    pub chassis: template_vars::ChassisRows,
    /// The Service whose rows name each variable.
    pub var_owner: HashMap<String, ServiceKey>,
}

/// What monitor events changed, for the next diff.
#[derive(Debug, Clone, Default)]
pub struct Touched {
    /// Services whose rows changed in the database.
    pub owners: BTreeSet<ServiceKey>,
    /// A switch, router or group changed: re-read them ([`Observed::refresh_holders`]).
    pub holders: bool,
}

pub fn holders_of(cache: &Cache, table: &str) -> BTreeMap<String, Holder> {
    let mut m = BTreeMap::new();
    for (uuid, row) in cache.table(table).into_iter().flatten() {
        if let Some(name) = str_of(row.get("name")) {
            m.insert(
                name,
                Holder {
                    uuid: *uuid,
                    lbs: uuids_of(row.get("load_balancer")),
                    groups: uuids_of(row.get("load_balancer_group")),
                },
            );
        }
    }
    m
}

impl Observed {
    pub fn from_cache(cache: &Cache) -> Observed {
        let mut o = Observed::default();
        for (uuid, row) in cache.table(LB).into_iter().flatten() {
            o.put_lb(*uuid, row);
        }
        for (uuid, row) in cache.table(CHASSIS_VARS).into_iter().flatten() {
            o.chassis.apply(*uuid, Some(row));
        }
        o.read_holders(cache);
        o
    }

    /// The variables the rows of `owner` in the database name.
    pub fn vars_of(&self, owner: &ServiceKey) -> BTreeSet<&str> {
        self.by_owner
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|u| self.lbs.get(u))
            .flat_map(|o| o.vars.iter().map(String::as_str))
            .collect()
    }

    /// Our rows, in no particular order.
    pub fn lbs(&self) -> impl Iterator<Item = &ObservedLb> {
        self.lbs.values()
    }

    /// The number of our rows.
    pub fn len(&self) -> usize {
        self.lbs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lbs.is_empty()
    }

    /// Our rows grouped by identity, each group by uuid (more than one: duplicates).
    pub fn by_key(&self) -> BTreeMap<&LbKey, Vec<&ObservedLb>> {
        let mut m: BTreeMap<&LbKey, Vec<&ObservedLb>> = BTreeMap::new();
        for o in self.lbs.values() {
            m.entry(&o.key).or_default().push(o);
        }
        for v in m.values_mut() {
            v.sort_by_key(|o| o.uuid);
        }
        m
    }

    /// One Service's rows grouped by identity, each group by uuid.
    pub fn rows_of(&self, owner: &ServiceKey) -> BTreeMap<&LbKey, Vec<&ObservedLb>> {
        let mut m: BTreeMap<&LbKey, Vec<&ObservedLb>> = BTreeMap::new();
        for u in self.by_owner.get(owner).into_iter().flatten() {
            if let Some(o) = self.lbs.get(u) {
                m.entry(&o.key).or_default().push(o);
            }
        }
        m
    }

    /// Record a Load_Balancer row; returns its Service if it is ours.
    pub fn put_lb(&mut self, uuid: Uuid, row: &Row) -> Option<ServiceKey> {
        let o = read_lb(uuid, row)?;
        let owner = o.key.owner.clone();
        for v in &o.vars {
            self.var_owner.insert(v.clone(), owner.clone());
        }
        self.by_owner.entry(owner.clone()).or_default().insert(uuid);
        self.lbs.insert(uuid, o);
        Some(owner)
    }

    /// Forget a Load_Balancer row; returns its Service if it was ours.
    pub fn remove_lb(&mut self, uuid: &Uuid) -> Option<ServiceKey> {
        let o = self.lbs.remove(uuid)?;
        for v in &o.vars {
            if self.var_owner.get(v) == Some(&o.key.owner) {
                self.var_owner.remove(v);
            }
        }
        if let Some(uuids) = self.by_owner.get_mut(&o.key.owner) {
            uuids.remove(uuid);
            if uuids.is_empty() {
                self.by_owner.remove(&o.key.owner);
            }
        }
        Some(o.key.owner)
    }

    /// Apply one monitor event. Events carry whole rows, so applying one twice, or one the
    /// cache already held when this was built, changes nothing.
    pub fn apply(&mut self, ev: &Event, touched: &mut Touched) {
        match ev {
            Event::Insert { table, uuid, new }
            | Event::Modify {
                table, uuid, new, ..
            } if table == LB => {
                // The same row again (a new monitor's snapshot replayed): nothing to diff.
                if let (Some(have), Some(now)) = (self.lbs.get(uuid), read_lb(*uuid, new))
                    && *have == now
                {
                    return;
                }
                touched.owners.extend(self.remove_lb(uuid));
                touched.owners.extend(self.put_lb(*uuid, new));
            }
            Event::Delete { table, uuid, .. } if table == LB => {
                touched.owners.extend(self.remove_lb(uuid));
            }
            Event::Insert { table, uuid, new }
            | Event::Modify {
                table, uuid, new, ..
            } if table == CHASSIS_VARS => {
                let changed = self.chassis.apply(*uuid, Some(new));
                self.touch_vars(changed, touched);
            }
            Event::Delete { table, uuid, .. } if table == CHASSIS_VARS => {
                let changed = self.chassis.apply(*uuid, None);
                self.touch_vars(changed, touched);
            }
            _ => touched.holders = true,
        }
    }

    /// The Services whose variables changed in the database are diffed again.
    fn touch_vars(&self, changed: BTreeSet<String>, touched: &mut Touched) {
        for n in changed {
            if let Some(o) = self.var_owner.get(&n) {
                touched.owners.insert(o.clone());
            }
        }
    }

    pub fn read_holders(&mut self, cache: &Cache) {
        self.ipam.clear();
        for (uuid, row) in cache.table(SWITCH).into_iter().flatten() {
            let other_config = map_of(row.get("other_config"));
            let external_ids = map_of(row.get("external_ids"));
            self.ipam.push(SwitchIpam {
                uuid: *uuid,
                ipam: LogicalSwitchIpam {
                    name: str_of(row.get("name")).unwrap_or_default(),
                    subnet: other_config.get("subnet").cloned(),
                    exclude_ips: other_config.get("exclude_ips").cloned(),
                    ours: external_ids.get(EXCLUDE_IPS_KEY).cloned(),
                },
                other_config,
                external_ids,
            });
        }
        self.groups = holders_of(cache, GROUP);
        self.switches = holders_of(cache, SWITCH);
        self.routers = holders_of(cache, ROUTER);
    }

    /// Re-read switches, routers and groups (few, next to load balancers). The Services whose
    /// rows were attached or detached are added to `touched`; returns true when a target came,
    /// went or was renamed, which can change any row's attachments.
    pub fn refresh_holders(&mut self, cache: &Cache, touched: &mut Touched) -> bool {
        let before = [
            std::mem::take(&mut self.groups),
            std::mem::take(&mut self.switches),
            std::mem::take(&mut self.routers),
        ];
        self.read_holders(cache);
        let after = [&self.groups, &self.switches, &self.routers];
        let mut targets_changed = false;
        for (old, new) in before.iter().zip(after) {
            let same_targets = old.len() == new.len()
                && old
                    .iter()
                    .zip(new.iter())
                    .all(|((an, a), (bn, b))| an == bn && a.uuid == b.uuid);
            if !same_targets {
                targets_changed = true;
                continue;
            }
            for (name, h) in new {
                let Some(o) = old.get(name) else { continue };
                for u in o.lbs.symmetric_difference(&h.lbs) {
                    if let Some(l) = self.lbs.get(u) {
                        touched.owners.insert(l.key.owner.clone());
                    }
                }
            }
        }
        targets_changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use crate::plan::northbound::{Attach, Scope};
    use crate::plan::str_map::StrMap;
    use crate::reconcile::northbound::lb_row::lb_columns;
    use proptest::collection::btree_map;
    use proptest::prelude::*;

    fn small_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        btree_map("[a-c]{0,2}", "[a-c]{0,2}", 0..4)
    }

    fn row_of(maps: [BTreeMap<String, String>; 4]) -> LbRow {
        let [vips, options, external_ids, ip_port_mappings] = maps.map(|m| StrMap::from(&m));
        LbRow {
            key: LbKey {
                owner: ServiceKey::new("ns", "svc"),
                protocol: Protocol::Tcp,
                scope: Scope::Cluster,
            },
            name: "lb".into(),
            vips,
            options,
            external_ids,
            ip_port_mappings,
            attach: Attach::default(),
            template_vars: Vec::new(),
        }
    }

    proptest! {
        /// A row as written and read back has the digest of its plan, and any other content
        /// (a pair changed, moved to another column, added or dropped) has another.
        #[test]
        fn digest_tells_rows_apart(
            a in [small_map(), small_map(), small_map(), small_map()],
            b in [small_map(), small_map(), small_map(), small_map()],
        ) {
            let (ra, rb) = (row_of(a.clone()), row_of(b.clone()));
            prop_assert_eq!(LbDigest::observed(&ra.name, &lb_columns(&ra)), LbDigest::planned(&ra));
            prop_assert_eq!(LbDigest::planned(&ra) == LbDigest::planned(&rb), a == b);
        }
    }

    #[test]
    fn a_pair_cannot_move_between_columns_unseen() {
        let m = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = BTreeMap::new;
        // With a bare marker between maps these two hashed the same input.
        let a = row_of([m(&[("", "a")]), e(), e(), e()]);
        let b = row_of([e(), m(&[("a", "")]), e(), e()]);
        assert_ne!(LbDigest::planned(&a), LbDigest::planned(&b));
    }
}
