use super::*;

const LONG: &str = "patch-br-ex_node-a-to-br-int";

fn iface(name: &str, kind: &str, ofport: u32, localnet: Option<&str>) -> OvsIface {
    OvsIface {
        port: name.into(),
        name: name.into(),
        kind: kind.into(),
        ofport: Some(ofport),
        localnet: localnet.map(Into::into),
    }
}

/// An OVN-Kubernetes node's br-ex: LOCAL, the NIC, the localnet patch port.
fn ovnk(mappings: Option<&str>) -> OvsView {
    OvsView {
        bridge_mappings: mappings.map(Into::into),
        integration_bridge: None,
        bridges: BTreeMap::from([
            (
                "br-ex".to_string(),
                vec![
                    iface("br-ex", "internal", 65534, None),
                    iface("ens3", "", 1, None),
                    iface(LONG, "patch", 2, Some("br-ex_node-a")),
                ],
            ),
            (
                "br-int".to_string(),
                vec![iface(
                    "patch-br-int-to-br-ex_node-a",
                    "patch",
                    1,
                    Some("br-ex_node-a"),
                )],
            ),
        ]),
    }
}

fn desc(entries: &[(u32, &str)]) -> BTreeMap<u32, String> {
    entries
        .iter()
        .map(|(n, s)| (*n, openflow_name(s)))
        .collect()
}

fn known(v: OvsView) -> OvsDb {
    OvsDb::Known(Arc::new(v))
}

#[test]
fn an_ovn_kubernetes_node_needs_no_port_names() {
    let v = ovnk(Some("physnet:br-ex"));
    assert_eq!(discover("br-ex", Role::Patch, &v).unwrap(), LONG);
    assert_eq!(discover("br-ex", Role::Uplink, &v).unwrap(), "ens3");
    let b = BridgeConfig::default();
    let d = desc(&[(1, "ens3"), (2, LONG), (65534, "br-ex")]);
    let db = known(v);
    assert_eq!(resolve_role(&b, Role::Patch, &d, &db), Ok(2));
    assert_eq!(resolve_role(&b, Role::Uplink, &d, &db), Ok(1));
}

#[test]
fn mappings_decide_which_bridge_is_ovns() {
    for m in [
        "physnet:br-ex",
        "a:br-foo,physnet:br-ex",
        " physnet:br-ex , ",
    ] {
        assert!(
            discover("br-ex", Role::Patch, &ovnk(Some(m))).is_ok(),
            "{m}"
        );
    }
    let e = discover("br-ex", Role::Patch, &ovnk(None)).unwrap_err();
    assert_eq!(
        e,
        PortError::NoMappings {
            bridge: "br-ex".into(),
            role: Role::Patch
        }
    );
    assert!(e.to_string().contains("set --patch"), "{e}");
    assert!(matches!(
        discover("br-ex", Role::Uplink, &ovnk(Some(""))),
        Err(PortError::NoMappings { .. })
    ));
    assert!(matches!(
        discover("br-ex", Role::Uplink, &ovnk(Some("physnet:br-foo"))),
        Err(PortError::NotMapped { .. })
    ));
    for bad in ["br-ex", "physnet:", ":br-ex"] {
        assert!(
            matches!(
                discover("br-ex", Role::Patch, &ovnk(Some(bad))),
                Err(PortError::BadMappings { .. })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        discover("br-gone", Role::Patch, &ovnk(Some("p:br-gone"))),
        Err(PortError::NoBridge { .. })
    ));
}

#[test]
fn missing_or_ambiguous_ports_name_the_candidates_and_the_flag() {
    let mut v = ovnk(Some("physnet:br-ex"));
    let br = v.bridges.get_mut("br-ex").unwrap();
    // Before ovn-controller made the localnet patch port: an unrelated patch port only.
    br.retain(|i| i.name != LONG);
    br.push(iface("patch-other", "patch", 5, None));
    let e = discover("br-ex", Role::Patch, &v).unwrap_err();
    assert_eq!(
        e.to_string(),
        "br-ex: no patch port configured and no localnet patch port on it (type patch, Port \
             external_ids:ovn-localnet-port, created by ovn-controller); other patch ports: \
             patch-other; set --patch"
    );
    // A second NIC: two uplink candidates.
    v.bridges
        .get_mut("br-ex")
        .unwrap()
        .push(iface("ens4", "dpdk", 6, None));
    let e = discover("br-ex", Role::Uplink, &v).unwrap_err();
    assert_eq!(
        e.to_string(),
        "br-ex: no uplink port configured and 2 candidates: ens3 (system), ens4 (dpdk); set \
             --uplink to one of them"
    );
    // Two localnet patch ports.
    let mut v = ovnk(Some("physnet:br-ex"));
    v.bridges.get_mut("br-ex").unwrap().push(iface(
        "patch-br-ex_x-to-br-int",
        "patch",
        7,
        Some("br-ex_x"),
    ));
    assert!(matches!(
        discover("br-ex", Role::Patch, &v),
        Err(PortError::Ambiguous { candidates, .. }) if candidates.len() == 2
    ));
    // Internal and patch ports only: no uplink.
    let mut v = ovnk(Some("physnet:br-ex"));
    v.bridges
        .get_mut("br-ex")
        .unwrap()
        .retain(|i| i.name != "ens3");
    assert_eq!(
        discover("br-ex", Role::Uplink, &v),
        Err(PortError::NoUplink {
            bridge: "br-ex".into()
        })
    );
}

#[test]
fn a_configured_name_is_authoritative() {
    let b = BridgeConfig {
        uplink: Some("eth9".into()),
        patch: Some(LONG.into()),
        ..BridgeConfig::default()
    };
    // No mappings at all: the configured names still resolve.
    let db = known(ovnk(None));
    let d = desc(&[(1, "ens3"), (2, LONG)]);
    assert_eq!(resolve_role(&b, Role::Patch, &d, &db), Ok(2));
    assert_eq!(
        resolve_role(&b, Role::Uplink, &d, &db),
        Err(PortError::NotOnBridge {
            port: "eth9".into(),
            bridge: "br-ex".into()
        })
    );
}

#[test]
fn the_database_number_must_agree_with_the_switch() {
    let db = known(ovnk(Some("physnet:br-ex")));
    // The switch lists the patch port under its truncated name at the same number.
    assert_eq!(number(LONG, "br-ex", &desc(&[(2, LONG)]), &db), Ok(2));
    assert_eq!(openflow_name(LONG), "patch-br-ex_nod");
    // Not (yet) on the switch, or there under another number: not resolved.
    for d in [desc(&[]), desc(&[(3, LONG)]), desc(&[(2, "other")])] {
        assert!(matches!(
            number(LONG, "br-ex", &d, &db),
            Err(PortError::NoNumber { .. })
        ));
    }
    // No ofport assigned yet.
    let mut v = ovnk(Some("physnet:br-ex"));
    v.bridges.get_mut("br-ex").unwrap()[2].ofport = None;
    assert!(matches!(
        number(LONG, "br-ex", &desc(&[(2, LONG)]), &known(v)),
        Err(PortError::NoNumber { .. })
    ));
    // On another bridge only.
    assert!(matches!(
        number(
            "patch-br-int-to-br-ex_node-a",
            "br-ex",
            &desc(&[(1, "x")]),
            &db
        ),
        Err(PortError::NotOnBridge { .. })
    ));
}

#[test]
fn without_the_database_short_names_come_from_port_desc() {
    let unreachable = OvsDb::Unreachable {
        remote: "unix:/run/openvswitch/db.sock".into(),
        reason: "No such file or directory".into(),
    };
    let d = desc(&[(1, "eth0"), (2, "patch-ex-to-int")]);
    for db in [OvsDb::NotUsed, unreachable.clone()] {
        assert_eq!(number("eth0", "br-ex", &d, &db), Ok(1));
        assert_eq!(number("patch-ex-to-int", "br-ex", &d, &db), Ok(2));
        assert!(matches!(
            number("eth1", "br-ex", &d, &db),
            Err(PortError::NotOnBridge { .. })
        ));
    }
    let e = number(LONG, "br-ex", &desc(&[(2, LONG)]), &unreachable).unwrap_err();
    assert_eq!(
        e.to_string(),
        "port patch-br-ex_node-a-to-br-int: a name longer than OpenFlow's 15 bytes is \
             resolved through the OVS database, which is unix:/run/openvswitch/db.sock is \
             unreachable (No such file or directory)"
    );
    // A 15-byte name that a longer port's truncation also shows: ambiguous without the
    // database.
    let d = desc(&[(2, LONG), (3, "patch-br-ex_nod")]);
    assert!(matches!(
        number("patch-br-ex_nod", "br-ex", &d, &OvsDb::NotUsed),
        Err(PortError::NeedsDatabase { .. })
    ));
    // And discovery needs the database.
    let e = role_name(&BridgeConfig::default(), Role::Patch, &unreachable).unwrap_err();
    assert!(e.is_discovery());
    assert!(e.to_string().contains("set --patch"), "{e}");
}

#[test]
fn truncation_is_by_bytes_as_the_switch_does_it() {
    assert_eq!(openflow_name("eth0"), "eth0");
    assert_eq!(openflow_name(&"a".repeat(15)), "a".repeat(15));
    assert_eq!(openflow_name(&"a".repeat(16)), "a".repeat(15));
    // A cut through a multi-byte character reads back lossily, as PORT_DESC parsing does.
    let n = format!("{}é", "a".repeat(14));
    assert_eq!(openflow_name(&n), format!("{}\u{fffd}", "a".repeat(14)));
}
