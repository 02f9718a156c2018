//! Tests of [`super`]: FRR's JSON as FRR 8.4 answers it, and answers vipflow cannot read.

use super::*;

#[test]
fn what_bgpd_originates_is_read_from_its_json_and_learned_routes_are_not() {
    // As FRR 8.4 answers `show bgp ipv4 unicast json` with one network of its own and
    // one route learned from a peer.
    let json = r#"{"vrfId": 0, "localAS": 64513, "routes": {
        "198.51.100.1/32": [{"valid":true,"bestpath":true,"pathFrom":"external",
            "network":"198.51.100.1/32","weight":32768,"peerId":"(unspec)","path":""}],
        "0.0.0.0/0": [{"valid":true,"bestpath":true,"pathFrom":"external",
            "network":"0.0.0.0/0","weight":0,"peerId":"10.9.0.1","path":"64512"}]
    }}"#;
    let got = bgp_table(json).expect("FRR's JSON");
    assert_eq!(got.local_as, Some(64513));
    assert_eq!(
        got.originated
            .into_iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
        ["198.51.100.1/32"]
    );
    // An empty family has no `routes`.
    assert!(
        bgp_table(r#"{"vrfId": 0}"#)
            .expect("empty")
            .originated
            .is_empty()
    );
    // bgpd without a default instance (never configured, or restarted without it).
    assert_eq!(
        bgp_table(r#"{"warning":"Default BGP instance not found"}"#).expect("read"),
        BgpTable::default()
    );
}

#[test]
fn an_answer_vipflow_cannot_read_is_an_error_not_a_panic() {
    for bad in [
        "",
        "not json",
        r#"{"routes": []}"#,
        r#"{"routes": {"nope": [{"peerId": "(unspec)"}]}}"#,
    ] {
        assert!(bgp_table(bad).is_err(), "{bad:?}");
    }
    // A path list of another shape names no path of bgpd's own.
    assert!(
        bgp_table(r#"{"routes": {"198.51.100.1/32": {"x": 1}}}"#)
            .expect("read")
            .originated
            .is_empty()
    );
}

#[test]
fn bgp_sessions_are_read_per_family_from_either_summary() {
    // `show bgp summary json`: every family under its name.
    let all = r#"{"ipv4Unicast": {"routerId": "10.9.0.2", "as": 64513, "peers": {
            "10.9.0.1": {"remoteAs": 64512, "state": "Established", "pfxRcd": 0, "pfxSnt": 2},
            "fabric": {"remoteAs": 64512, "state": "Active"}}},
        "ipv6Unicast": {"routerId": "10.9.0.2", "as": 64513, "peers": {
            "10.9.0.1": {"remoteAs": 64512, "state": "Established", "pfxRcd": 0, "pfxSnt": 1}}}}"#;
    let got = bgp_sessions(all).expect("FRR's JSON");
    assert_eq!(got.len(), 2, "the named peer is not an address: {got:?}");
    assert!(got.iter().all(BgpSession::established));
    assert_eq!(got[0].family, "ipv4Unicast");
    assert_eq!(got[0].prefixes_sent, Some(2));
    assert_eq!(got[1].family, "ipv6Unicast");
    // `show bgp ipv4 unicast summary json`: one family, unnamed.
    let one = r#"{"routerId": "10.9.0.2", "as": 64513, "peers": {
        "fd00:9::1": {"remoteAs": 64512, "state": "Connect"}}}"#;
    let got = bgp_sessions(one).expect("FRR's JSON");
    assert_eq!(got.len(), 1);
    assert!(!got[0].established());
    assert_eq!(got[0].remote_as, Some(64512));
    // No BGP instance: no family, no session.
    assert!(bgp_sessions("{}").expect("empty").is_empty());
}

#[test]
fn bfd_sessions_are_read_with_their_intervals() {
    let json = r#"[{"multihop": false, "peer": "10.9.0.1", "local": "10.9.0.2", "vrf": "default",
        "id": 1, "remote-id": 2, "passive-mode": false, "status": "up", "uptime": 3,
        "diagnostic": "ok", "remote-diagnostic": "ok", "receive-interval": 300,
        "transmit-interval": 300, "echo-receive-interval": 50, "detect-multiplier": 3}]"#;
    let got = bfd_sessions(json).expect("FRR's JSON");
    assert_eq!(got.len(), 1);
    assert!(got[0].up());
    assert_eq!(
        (got[0].receive_ms, got[0].transmit_ms, got[0].multiplier),
        (Some(300), Some(300), Some(3))
    );
    assert!(bfd_sessions("[]").expect("none").is_empty());
}

#[test]
fn session_answers_vipflow_cannot_read_are_errors_not_panics() {
    for bad in [
        "",
        "nope",
        "[]",
        r#"{"peers": []}"#,
        r#"{"peers": {"10.9.0.1": {}}}"#,
    ] {
        assert!(bgp_sessions(bad).is_err(), "{bad:?}");
    }
    for bad in [
        "",
        "{}",
        r#"[{"status": "up"}]"#,
        r#"[{"peer": "x", "status": "up"}]"#,
        r#"[{"peer": "10.9.0.1"}]"#,
    ] {
        assert!(bfd_sessions(bad).is_err(), "{bad:?}");
    }
}
