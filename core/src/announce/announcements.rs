//! The VIPs this node announces, kept up to date by each snapshot: a sticky [`Placement`] of
//! every VIP over the live nodes, and what changed for this node.
//!
//! Live nodes come from the membership when one runs (else from the Nodes' Ready condition,
//! the slow signal). Every agent sees the same Nodes and VIPs and makes the same moves from the
//! same history; the owners' claims, which the membership carries, settle what the histories
//! do not share (a node that was cut off, or restarted, takes the owners it is told).

use super::placement::{Claim, Eligible, Move, NodeName, Placement};
use crate::keys::DRAIN_ANNOTATION;
use k8s_openapi::api::core::v1 as core;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

/// A VIP this node took (`here`) or gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Turn {
    pub vip: IpAddr,
    pub here: bool,
}

/// What one update changed for this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlacementChange {
    /// The VIPs it took or gave up, in VIP order.
    pub turns: Vec<Turn>,
    /// Nodes became live. Either side of a healed partition may have announced a VIP while
    /// they could not see each other, so every owner announces its VIPs again.
    pub joined: bool,
    /// The live set changed.
    pub live_changed: bool,
    /// The claims this node makes changed (a VIP taken or given up, or a new epoch).
    pub claims_changed: bool,
}

/// What the membership tells the placement: who is live, and the owners the live nodes claim
/// (the best claim heard for each VIP).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MembershipView {
    pub live: Arc<BTreeSet<NodeName>>,
    pub claims: imbl::OrdMap<IpAddr, Claim>,
    /// This node hears nothing from any other (its uplink or its switch is gone): the deaths
    /// it finds meanwhile are its own cut, not the others'.
    pub isolated: bool,
}

/// Who announces what, from this node's side.
#[derive(Debug, Clone)]
pub struct Announcements {
    node: NodeName,
    placement: Placement,
    vips: imbl::OrdSet<IpAddr>,
    live: BTreeSet<NodeName>,
    /// Count this node live though it is marked for drain (the others take its VIPs first).
    hold: bool,
    /// The Nodes last read and the ones of them that may announce: a snapshot whose Nodes are
    /// the same objects (most changes touch Services) is not read again.
    nodes_read: (Vec<Arc<core::Node>>, BTreeSet<NodeName>),
    /// The membership's claims as last adopted: only what changed since is adopted again.
    claims_seen: imbl::OrdMap<IpAddr, Claim>,
    /// This node sees fewer than half of the Nodes, or hears no one (see
    /// [`Announcements::in_doubt`]).
    small_side: bool,
    /// This node heard no one at the last update ([`MembershipView::isolated`]).
    isolated: bool,
}

impl Announcements {
    /// Keep (`true`) or stop keeping this node's VIPs while it is marked for drain: the agent
    /// holds them for a moment after the mark appears, so that the others answer and announce
    /// before this node stops (make before break).
    pub fn hold_while_draining(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// For the node named `node` (the agent's `node-name`).
    pub fn new(node: &str) -> Announcements {
        Announcements {
            node: Arc::from(node),
            placement: Placement::default(),
            vips: imbl::OrdSet::new(),
            live: BTreeSet::new(),
            hold: false,
            nodes_read: (Vec::new(), BTreeSet::new()),
            claims_seen: imbl::OrdMap::new(),
            small_side: false,
            isolated: false,
        }
    }

    /// Bring the placement up to date with `vips`, `nodes` and the membership's live set
    /// (`members`, when one runs: a Node is live when it is both a member and not NotReady);
    /// returns the VIPs this node took or gave up, in VIP order. Work follows the change: the
    /// VIP sets are compared without visiting what they share, and a change of live nodes
    /// moves only the VIPs it must.
    pub fn update(
        &mut self,
        vips: &imbl::OrdSet<IpAddr>,
        nodes: &[Arc<core::Node>],
        members: Option<&MembershipView>,
    ) -> PlacementChange {
        self.update_eligible(vips, nodes, members, &|_| Eligible::Any, &[])
    }

    /// [`Announcements::update`] where not every live node may announce every VIP: `eligible`
    /// says which may ([`crate::plan::eligibility`]), and `changed` names the VIPs whose
    /// eligible nodes may have changed since the last update.
    pub fn update_eligible(
        &mut self,
        vips: &imbl::OrdSet<IpAddr>,
        nodes: &[Arc<core::Node>],
        members: Option<&MembershipView>,
        eligible: &dyn Fn(IpAddr) -> Eligible,
        changed: &[IpAddr],
    ) -> PlacementChange {
        let mut moves: Vec<Move> = Vec::new();
        let mine_before = self.claims();
        let same = self.nodes_read.0.len() == nodes.len()
            && self
                .nodes_read
                .0
                .iter()
                .zip(nodes)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            self.nodes_read = (nodes.to_vec(), live_nodes(nodes));
        }
        let mut ready = self.nodes_read.1.clone();
        if self.hold {
            ready.insert(self.node.clone());
        }
        let mut live = ready.clone();
        let was_isolated = self.isolated;
        self.small_side = false;
        self.isolated = members.is_some_and(|m| m.isolated);
        if let Some(m) = members {
            live.retain(|n| m.live.contains(n));
            // Seeing fewer than half of the nodes, this node is on the small side of a
            // partition (or cut off): it keeps to its own share of the whole and takes no one
            // else's, or it would answer for every VIP on its side. Hearing no one at all, it
            // is cut off whatever its view says yet.
            if self.isolated || live.len() * 2 < ready.len() {
                live = ready.clone();
                self.small_side = true;
            }
        }
        let entering_isolation = self.isolated && !was_isolated;
        let whole = !self.small_side && live == ready;
        let no_claims = imbl::OrdMap::new();
        let claims = members.map_or(&no_claims, |m| &m.claims);
        let joined = live.difference(&self.live).next().is_some();
        let live_changed = live != self.live;
        if live_changed {
            self.live = live.clone();
            moves.extend(self.placement.set_live(live));
        }
        for d in self.vips.diff(vips) {
            match d {
                imbl::ordset::DiffItem::Add(v) => moves.extend(self.placement.put_vip_claimed(
                    *v,
                    eligible(*v),
                    claims.get(v).cloned(),
                )),
                imbl::ordset::DiffItem::Remove(v) => moves.extend(self.placement.remove_vip(*v)),
            }
        }
        // A VIP just added was placed with its eligible nodes already: this is a no-op for it.
        for v in changed.iter().filter(|v| vips.contains(*v)) {
            moves.extend(self.placement.put_vip(*v, eligible(*v)));
        }
        self.vips = vips.clone();
        // The owners the others claim: what changed since the last update, or every claim when
        // the live set changed (a claim for a node that was not live before fits now).
        if live_changed {
            moves.extend(
                self.placement
                    .adopt(claims.iter().map(|(v, c)| (*v, c.clone()))),
            );
        } else {
            let fresh: Vec<(IpAddr, Claim)> = self
                .claims_seen
                .diff(claims)
                .filter_map(|d| match d {
                    imbl::ordmap::DiffItem::Add(v, c)
                    | imbl::ordmap::DiffItem::Update { new: (v, c), .. } => Some((*v, c.clone())),
                    imbl::ordmap::DiffItem::Remove(..) => None,
                })
                .collect();
            moves.extend(self.placement.adopt(fresh));
        }
        self.claims_seen = claims.clone();
        if entering_isolation {
            // Cut off after all: the VIPs this node took since it last saw every node (the
            // others' deaths it found were its own cut) go back to their owners.
            moves.extend(self.placement.rollback());
        }
        if whole {
            self.placement.checkpoint();
        }
        // A VIP can move more than once in one update: what counts is where it ended up.
        let mut turns: Vec<Turn> = Vec::new();
        let mut seen: BTreeSet<IpAddr> = BTreeSet::new();
        let first_from: Vec<(IpAddr, bool)> = moves
            .iter()
            .filter(|m| seen.insert(m.vip))
            .map(|m| (m.vip, m.from.as_ref() == Some(&self.node)))
            .collect();
        for (vip, was) in first_from {
            let now = self.placement.owner(vip) == Some(&self.node);
            if was != now {
                turns.push(Turn { vip, here: now });
            }
        }
        turns.sort();
        PlacementChange {
            turns,
            joined,
            live_changed,
            claims_changed: self.claims() != mine_before,
        }
    }

    /// The claims this node makes: each VIP it owns, with the VIP's epoch.
    pub fn claims(&self) -> std::collections::BTreeMap<IpAddr, u64> {
        self.placement
            .owned_by(&self.node)
            .filter_map(|v| Some((*v, self.placement.claim(*v)?.epoch)))
            .collect()
    }

    /// Whether this node saw fewer than half of the Nodes at the last update (cut off, or on
    /// the small side of a partition): it keeps its VIPs but the others may have taken them
    /// meanwhile, which it learns only when it sees them again.
    pub fn in_doubt(&self) -> bool {
        self.small_side
    }

    /// The node that announces `vip`, if any is live.
    pub fn owner(&self, vip: IpAddr) -> Option<&NodeName> {
        self.placement.owner(vip)
    }

    /// Every VIP's owner (a snapshot).
    pub fn owners(&self) -> imbl::OrdMap<IpAddr, NodeName> {
        self.placement.owners()
    }

    /// The VIPs this node announces.
    pub fn here(&self) -> impl Iterator<Item = &IpAddr> {
        self.placement.owned_by(&self.node)
    }

    /// The nodes that take this node's VIPs if it goes (each VIP's successor): they watch it
    /// ([`crate::membership::watch`]).
    pub fn successors(&self) -> BTreeSet<NodeName> {
        self.here()
            .filter_map(|v| self.placement.successor(*v))
            .collect()
    }

    /// The nodes that may announce, as of the last update.
    pub fn live(&self) -> &BTreeSet<NodeName> {
        &self.live
    }
}

/// Whether `node` is marked for drain ([`DRAIN_ANNOTATION`]).
pub fn draining(node: &core::Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DRAIN_ANNOTATION))
        .is_some_and(|v| v != "false")
}

/// Whether `node` may announce: its Ready condition is True, or it has none (a Node written
/// by hand in an objects file), it is not marked for drain, and not labelled
/// [`EXCLUDE_FROM_LOAD_BALANCERS_LABEL`](crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL) (as
/// MetalLB's L2 and vipflow's BGP leave such a node out).
pub fn is_live(node: &core::Node) -> bool {
    !draining(node) && !excluded(node) && is_ready(node)
}

/// Whether `node` is cordoned (`spec.unschedulable`): being drained for maintenance.
pub fn cordoned(node: &core::Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether `node` is labelled
/// [`EXCLUDE_FROM_LOAD_BALANCERS_LABEL`](crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL).
pub fn excluded(node: &core::Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL))
}

/// Whether `node`'s Ready condition is True, or it has none (a Node written by hand in an
/// objects file), whatever its drain mark says.
pub fn is_ready(node: &core::Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_none_or(|c| c.status == "True")
}

/// The named Nodes that may announce ([`is_live`]).
pub fn live_nodes(nodes: &[Arc<core::Node>]) -> BTreeSet<NodeName> {
    nodes
        .iter()
        .filter(|n| is_live(n))
        .filter_map(|n| n.metadata.name.as_deref().map(Arc::from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn node(name: &str, ready: Option<&str>) -> Arc<core::Node> {
        let mut n = core::Node::default();
        n.metadata.name = Some(name.into());
        if let Some(r) = ready {
            n.status = Some(core::NodeStatus {
                conditions: Some(vec![core::NodeCondition {
                    type_: "Ready".into(),
                    status: r.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        Arc::new(n)
    }

    fn vips(n: u32) -> imbl::OrdSet<IpAddr> {
        (0..n)
            .map(|i| IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i)))
            .collect()
    }

    /// The membership's view: `live`, and the claims of `owners` merged as the membership
    /// merges them (the winning claim per VIP).
    fn view(live: &[&str], owners: &[&Announcements]) -> MembershipView {
        let mut claims: imbl::OrdMap<IpAddr, Claim> = imbl::OrdMap::new();
        for a in owners {
            for (vip, epoch) in a.claims() {
                let c = Claim {
                    node: a.node.clone(),
                    epoch,
                };
                if claims.get(&vip).is_none_or(|old| c.beats(vip, old)) {
                    claims.insert(vip, c);
                }
            }
        }
        MembershipView {
            live: Arc::new(live.iter().map(|n| NodeName::from(*n)).collect()),
            claims,
            isolated: false,
        }
    }

    fn here(a: &Announcements) -> BTreeSet<IpAddr> {
        a.here().copied().collect()
    }

    /// Three Ready nodes n1..n3, 30 VIPs, and each node's view once all three are members:
    /// the Nodes, the VIPs, the names, each node's announcements and what each owns.
    #[allow(clippy::type_complexity)]
    fn three_placed() -> (
        [Arc<core::Node>; 3],
        imbl::OrdSet<IpAddr>,
        [&'static str; 3],
        Vec<Announcements>,
        Vec<BTreeSet<IpAddr>>,
    ) {
        let all = [
            node("n1", Some("True")),
            node("n2", Some("True")),
            node("n3", Some("True")),
        ];
        let v = vips(30);
        let names = ["n1", "n2", "n3"];
        let mut each: Vec<Announcements> = names.iter().map(|n| Announcements::new(n)).collect();
        for a in &mut each {
            a.update(&v, &all, Some(&view(&names, &[])));
        }
        let first: Vec<BTreeSet<IpAddr>> = each.iter().map(here).collect();
        (all, v, names, each, first)
    }

    /// n1 is cut off (its switch restarted, or its uplink): n2 and n3 take its VIPs, n1 keeps
    /// them on its side. When they see each other again, n1 learns the others' claims and gives
    /// those VIPs up; nothing moves back to it. The same when n1's agent restarts: it takes
    /// only what it is told it owns.
    #[test]
    fn a_node_that_comes_back_takes_nothing_back() {
        let (all, v, names, mut each, first) = three_placed();
        assert!(first.iter().all(|h| !h.is_empty()));
        // Cut: n1 sees itself alone, the others see each other.
        let cut = each[0].update(&v, &all, Some(&view(&["n1"], &[])));
        assert!(cut.turns.is_empty());
        assert!(each[0].in_doubt());
        for a in &mut each[1..] {
            a.update(&v, &all, Some(&view(&["n2", "n3"], &[])));
        }
        let taken: BTreeSet<IpAddr> = here(&each[1]).union(&here(&each[2])).copied().collect();
        assert_eq!(taken.len(), 30);
        let during: Vec<BTreeSet<IpAddr>> = each.iter().map(here).collect();
        // Healed: every node hears every claim.
        let healed = view(&names, &[&each[0], &each[1], &each[2]]);
        let back = each[0].update(&v, &all, Some(&healed));
        assert!(!each[0].in_doubt());
        assert!(back.turns.iter().all(|t| !t.here), "{back:?}");
        assert_eq!(back.turns.len(), first[0].len());
        assert!(here(&each[0]).is_empty());
        for (i, a) in each.iter_mut().enumerate().skip(1) {
            let c = a.update(&v, &all, Some(&healed));
            assert!(c.turns.is_empty(), "node{} moved: {c:?}", i + 1);
            assert_eq!(here(a), during[i]);
        }
        // n2 restarts: it knows nothing, and takes exactly what it owned.
        let told = view(&names, &[&each[0], &each[1], &each[2]]);
        let mut n2 = Announcements::new("n2");
        n2.update(&v, &all, Some(&told));
        assert_eq!(here(&n2), during[1]);
        for (i, a) in each.iter_mut().enumerate() {
            assert!(
                a.update(&v, &all, Some(&told)).turns.is_empty(),
                "node{}",
                i + 1
            );
        }
        // A new VIP goes to its best node, as every node elects it alike.
        let mut more = v.clone();
        more.insert(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 200)));
        let owners: Vec<usize> = each
            .iter_mut()
            .map(|a| a.update(&more, &all, Some(&told)).turns.len())
            .collect();
        assert_eq!(owners.iter().sum::<usize>(), 1);
    }

    /// n2 is cut off, and its membership finds the others dead one at a time: it sees n3 die
    /// first (with n1 still live it looks like the big side) and takes n3's VIPs. Then it
    /// hears no one: it gives back what it took meanwhile; when the cut heals, n3 keeps its
    /// VIPs and n2 learns that n1 and n3 took its own.
    #[test]
    fn a_cut_off_node_undoes_what_it_took_before_it_knew_it_was_cut_off() {
        let (all, v, names, mut each, first) = three_placed();
        let took = each[1].update(&v, &all, Some(&view(&["n1", "n2"], &[])));
        assert!(took.turns.iter().all(|t| t.here) && !took.turns.is_empty());
        let alone = each[1].update(
            &v,
            &all,
            Some(&MembershipView {
                isolated: true,
                ..view(&["n1", "n2"], &[])
            }),
        );
        assert_eq!(alone.turns.len(), took.turns.len());
        assert_eq!(here(&each[1]), first[1]);
        for i in [0, 2] {
            each[i].update(&v, &all, Some(&view(&["n1", "n3"], &[])));
        }
        let healed = view(&names, &[&each[0], &each[1], &each[2]]);
        let n3 = here(&each[2]);
        for a in &mut each {
            a.update(&v, &all, Some(&healed));
        }
        assert!(here(&each[1]).is_empty());
        assert_eq!(here(&each[2]), n3);
        assert!(first[2].is_subset(&n3));
    }

    #[test]
    fn a_node_that_sees_fewer_than_half_takes_no_one_elses_vips() {
        let all = [
            node("n1", Some("True")),
            node("n2", Some("True")),
            node("n3", Some("True")),
        ];
        let v = vips(30);
        let mut whole = Announcements::new("n1");
        whole.update(&v, &all, None);
        let own: BTreeSet<IpAddr> = whole.here().copied().collect();
        // Cut off: its membership sees itself alone. It keeps its own share, no more.
        let alone = view(&["n1"], &[]);
        let mut cut = Announcements::new("n1");
        cut.update(&v, &all, Some(&alone));
        let kept: BTreeSet<IpAddr> = cut.here().copied().collect();
        assert_eq!(kept, own);
        // On the big side, n2 sees n1 gone and takes some of its VIPs.
        let big = view(&["n2", "n3"], &[]);
        let mut n2 = Announcements::new("n2");
        let before: BTreeSet<IpAddr> = {
            n2.update(&v, &all, None);
            n2.here().copied().collect()
        };
        let c = n2.update(&v, &all, Some(&big));
        assert!(c.turns.iter().all(|t| t.here && own.contains(&t.vip)));
        assert!(!c.turns.is_empty());
        assert!(n2.here().count() > before.len());
    }

    #[test]
    fn a_draining_node_is_not_live_unless_it_holds_its_own_for_a_moment() {
        let mut drained = node("n1", Some("True"));
        Arc::make_mut(&mut drained)
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(DRAIN_ANNOTATION.into(), "true".into());
        let all = [drained, node("n2", Some("True")), node("n3", Some("True"))];
        let names: Vec<String> = live_nodes(&all).iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["n2", "n3"]);
        let v = vips(30);
        let mut n1 = Announcements::new("n1");
        n1.hold_while_draining(true);
        let held = n1.update(&v, &all, None);
        assert!(!held.turns.is_empty(), "n1 keeps its share while it holds");
        n1.hold_while_draining(false);
        let gone = n1.update(&v, &all, None);
        assert_eq!(gone.turns.len(), held.turns.len());
        assert!(gone.turns.iter().all(|t| !t.here));
    }

    #[test]
    fn ready_or_unreported_nodes_are_live() {
        let live = live_nodes(&[
            node("a", Some("True")),
            node("b", Some("False")),
            node("c", Some("Unknown")),
            node("d", None),
        ]);
        let names: Vec<&str> = live.iter().map(|n| n.as_ref()).collect();
        assert_eq!(names, ["a", "d"]);
    }

    #[test]
    fn a_node_excluded_from_external_load_balancers_announces_nothing() {
        let mut e = (*node("e", Some("True"))).clone();
        e.metadata.labels = Some(
            [(
                crate::keys::EXCLUDE_FROM_LOAD_BALANCERS_LABEL.to_string(),
                String::new(),
            )]
            .into(),
        );
        let live = live_nodes(&[node("a", Some("True")), Arc::new(e)]);
        let names: Vec<&str> = live.iter().map(|n| n.as_ref()).collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn three_nodes_split_the_vips_and_a_dead_one_hands_its_own_over() {
        let all = [
            node("n1", Some("True")),
            node("n2", Some("True")),
            node("n3", Some("True")),
        ];
        let v = vips(30);
        let mut each: Vec<Announcements> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| Announcements::new(n))
            .collect();
        let mut mine: Vec<BTreeSet<IpAddr>> = Vec::new();
        for a in &mut each {
            let turns = a.update(&v, &all, None).turns;
            assert!(turns.iter().all(|t| t.here));
            mine.push(turns.iter().map(|t| t.vip).collect());
        }
        // Every VIP exactly once, and every node has some.
        let total: usize = mine.iter().map(|m| m.len()).sum();
        assert_eq!(total, 30);
        assert!(mine.iter().all(|m| !m.is_empty()), "{mine:?}");
        let union: BTreeSet<IpAddr> = mine.iter().flatten().copied().collect();
        assert_eq!(union.len(), 30);

        // n1 goes NotReady: it gives up all of its VIPs, the others take exactly those.
        let n1_down = [
            node("n1", Some("False")),
            node("n2", Some("True")),
            node("n3", Some("True")),
        ];
        let lost = each[0].update(&v, &n1_down, None).turns;
        assert!(lost.iter().all(|t| !t.here));
        assert_eq!(lost.len(), mine[0].len());
        let mut taken = BTreeSet::new();
        for a in &mut each[1..] {
            let turns = a.update(&v, &n1_down, None).turns;
            assert!(turns.iter().all(|t| t.here));
            taken.extend(turns.iter().map(|t| t.vip));
        }
        assert_eq!(taken, mine[0]);

        // A node that starts now agrees with the ones that saw it happen.
        let mut late = Announcements::new("n2");
        late.update(&v, &n1_down, None);
        let a: BTreeSet<&IpAddr> = late.here().collect();
        let b: BTreeSet<&IpAddr> = each[1].here().collect();
        assert_eq!(a, b);

        // A VIP that goes is given up by its owner only.
        let gone = *each[1].here().next().expect("n2 owns some");
        let mut fewer = v.clone();
        fewer.remove(&gone);
        assert_eq!(
            each[1].update(&fewer, &n1_down, None).turns,
            [Turn {
                vip: gone,
                here: false
            }]
        );
        assert_eq!(each[2].update(&fewer, &n1_down, None).turns, []);
    }
}
