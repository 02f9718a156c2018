//! Tests of [`super`]: which statements MetalLB objects' problems make, and when each is due.

use super::*;

/// MetalLB objects as the API server serves them: a peer with `passwordSecret` (left out), an
/// L2 advertisement with `interfaces` (used without it), and supported ones.
const OBJECTS: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: metallb.io/v1beta2
  kind: BGPPeer
  metadata: {name: tor, namespace: metallb-system, uid: 11111111-2222-3333-4444-555555555555}
  spec:
    myASN: 64512
    peerASN: 64513
    peerAddress: 172.30.0.3
    passwordSecret: {name: tor-secret, namespace: metallb-system}
- apiVersion: metallb.io/v1beta2
  kind: BGPPeer
  metadata: {name: spine, namespace: metallb-system}
  spec: {myASN: 64512, peerASN: 64514, peerAddress: 172.30.0.4}
- apiVersion: metallb.io/v1beta1
  kind: L2Advertisement
  metadata: {name: l2, namespace: metallb-system}
  spec:
    interfaces: [eth0]
- apiVersion: metallb.io/v1beta1
  kind: IPAddressPool
  metadata: {name: first-pool, namespace: metallb-system}
  spec:
    addresses: [192.0.2.0/24]
    serviceAllocation:
      serviceSelectors: [{matchLabels: {app: web}}]
- apiVersion: vipflow.io/v1alpha1
  kind: BGPPeer
  metadata: {name: ours}
  spec: {myASN: 64512, peerASN: 64515, peerAddress: 172.30.0.5, vrf: red}
"#;

fn said() -> BTreeSet<Statement> {
    let loaded = crate::decode::parse(OBJECTS).expect("the objects parse");
    statements(&loaded.problems)
}

#[test]
fn each_unsupported_field_of_a_metallb_object_is_one_warning_on_that_object() {
    let got: Vec<(String, Option<String>, &str, String)> = said()
        .into_iter()
        .map(|s| {
            (
                format!("{} {}", s.object.api_version, s.object),
                s.object.uid,
                s.reason,
                s.note,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "metallb.io/v1beta1 L2Advertisement metallb-system/l2".to_string(),
                None,
                FIELD_NOT_SUPPORTED,
                "interfaces (eth0) is not supported: vipflow answers ARP/ND in the switch of each \
                 announcing bridge, on the port a request came in by; the advertisement is used \
                 without it"
                    .to_string(),
            ),
            (
                "metallb.io/v1beta2 BGPPeer metallb-system/tor".to_string(),
                Some("11111111-2222-3333-4444-555555555555".to_string()),
                OBJECT_NOT_SUPPORTED,
                "passwordSecret is not supported: give the password in password (a session \
                 without it would fail); skipped"
                    .to_string(),
            ),
        ],
        "the supported peer and pool say nothing, and vipflow's own peer (an unknown field) is \
         not MetalLB's"
    );
}

#[test]
fn a_statement_is_due_once_while_it_holds_and_again_after_it_stopped_holding() {
    let now = said();
    let mut ledger = Ledger::default();
    ledger.update(now.clone());
    let first = ledger.due();
    assert_eq!(first.len(), 2);
    // One write fails: it stays due, in the same turn.
    ledger.said(first[0].digest);
    assert_eq!(ledger.due(), [first[1].clone()]);
    ledger.said(first[1].digest);
    // The next snapshots hold the same: nothing more to say.
    ledger.update(now.clone());
    assert!(ledger.due().is_empty());
    // The peer loses passwordSecret: nothing to say, and it is forgotten.
    let without_peer: BTreeSet<Statement> =
        (now.iter().filter(|s| s.object.kind != "BGPPeer").cloned()).collect();
    ledger.update(without_peer.clone());
    assert!(ledger.due().is_empty());
    ledger.update(without_peer);
    assert!(ledger.due().is_empty());
    // It comes back: said again, in a new turn.
    ledger.update(now.clone());
    let again = ledger.due();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].statement.object.name, "tor");
    assert!(first.iter().all(|f| f.turn != again[0].turn));
}

#[test]
fn what_an_earlier_leader_said_is_not_said_again_while_it_holds() {
    let now = said();
    let digests: Vec<u64> = now.iter().map(Statement::digest).collect();
    let mut ledger = Ledger::default();
    // Read back from the API server: both said, and an Event of a statement that no longer
    // holds.
    ledger.learned(digests.iter().copied().chain([7]));
    ledger.update(now.clone());
    assert!(ledger.due().is_empty());
    // What no longer held was forgotten; what still holds is not due.
    ledger.said(7);
    ledger.update(now);
    assert!(ledger.due().is_empty());
}

#[test]
fn a_digest_names_its_object_reason_and_note() {
    let s = (said().into_iter())
        .find(|s| s.object.uid.is_some())
        .expect("the peer's statement");
    let mut other = s.clone();
    assert_eq!(other.digest(), s.digest());
    other.object.uid = None;
    assert_ne!(other.digest(), s.digest(), "a new object of the same name");
    let mut other = s.clone();
    other.reason = FIELD_NOT_SUPPORTED;
    assert_ne!(other.digest(), s.digest());
}
