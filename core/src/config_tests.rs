use super::*;

#[test]
fn yaml_config_with_every_key() {
    let y = r#"
node-name: node-a
ovs-rundir: /run/ovs
ovs-db: unix:/run/ovs/db.sock
cookie-prefix: "0x7f20"
load-balancer-class: example.com/vip
bridges:
  - name: br-ex
    uplink: eth1
    patch: patch-ex-to-int
    gateway-mode: local
    vlan: 100
    table: 0
    priority: 600
    bridge-mac: "02:00:00:00:00:01"
  - name: br-provider
    profile: underlay
    uplink: ens4
    patch: patch-prov
    router-mac: "0a:58:0a:f4:00:01"
"#;
    let c: Config = serde_yaml_ng::from_str(y).unwrap();
    c.validate().unwrap();
    assert_eq!(c.cookie_prefix, 0x7f20);
    assert_eq!(c.bridges[0].vlan, Some(100));
    assert_eq!(c.bridges[1].patch.as_deref(), Some("patch-prov"));
    assert_eq!(c.bridges[0].bridge_mac, Some([2, 0, 0, 0, 0, 1]));
    assert_eq!(c.bridges[1].profile, Profile::Underlay);
    assert_eq!(
        c.bridges[1].priority, 500,
        "defaults fill what is not given"
    );
}

#[test]
fn unknown_keys_and_bad_values_are_errors() {
    assert!(serde_yaml_ng::from_str::<Config>("node-nam: x").is_err());
    assert!(serde_yaml_ng::from_str::<Config>("bridges: [{name: br-ex, bridge-mac: zz}]").is_err());
    // Full OVS names are resolved through the OVS database: no OpenFlow 15-byte limit.
    let mut c = Config::default();
    c.bridges[0].patch = Some("patch-br-ex_node-a-to-br-int".into());
    c.validate().unwrap();
    let mut c = Config::default();
    c.bridges[0].profile = Profile::Underlay;
    assert!(c.validate().is_err());
}

fn prefix(yaml: &str) -> Result<u16, String> {
    serde_yaml_ng::from_str::<Config>(yaml)
        .map(|c| c.cookie_prefix)
        .map_err(|e| e.to_string())
}

#[test]
fn cookie_prefix_as_hex_string_or_decimal_number() {
    assert_eq!(prefix(r#"cookie-prefix: "0x7f1f""#), Ok(0x7f1f));
    assert_eq!(prefix(r#"cookie-prefix: "0X7F1F""#), Ok(0x7f1f));
    assert_eq!(prefix("cookie-prefix: 32543"), Ok(0x7f1f));
    assert_eq!(prefix(r#"cookie-prefix: "32543""#), Ok(0x7f1f));
    assert_eq!(prefix("node-name: a"), Ok(DEFAULT_COOKIE_PREFIX));
    for bad in [
        "cookie-prefix: 65536",
        "cookie-prefix: -1",
        r#"cookie-prefix: "0x10000""#,
        r#"cookie-prefix: "0x""#,
        r#"cookie-prefix: "7f1f""#,
        r#"cookie-prefix: """#,
    ] {
        assert!(prefix(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn cookie_prefix_is_written_as_hex_and_reads_back() {
    let c = Config::default();
    let y = serde_yaml_ng::to_string(&c).unwrap();
    assert!(y.contains("cookie-prefix: '0x7f1f'"), "{y}");
    assert_eq!(serde_yaml_ng::from_str::<Config>(&y).unwrap(), c);
    assert_eq!(c.cookie_base(), 0x7f1f_0000_0000_0000);
    assert_eq!(c.cookie_mask(), 0xffff_0000_0000_0000);
}

#[test]
fn vlan_must_be_1_to_4094() {
    let with_vlan = |v| {
        let mut c = Config::default();
        c.bridges[0].vlan = Some(v);
        c.validate()
    };
    assert!(with_vlan(0).is_err());
    assert!(with_vlan(4095).is_err());
    assert!(with_vlan(u16::MAX).is_err());
    assert!(with_vlan(1).is_ok());
    assert!(with_vlan(4094).is_ok());
}

#[test]
fn duplicate_bridge_names_are_rejected() {
    let c: Config = serde_yaml_ng::from_str(
        "bridges: [{name: br-ex, uplink: eth0}, {name: br-ex, uplink: eth1}]",
    )
    .unwrap();
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("bridge br-ex is configured twice"), "{e}");
}

#[test]
fn a_northbound_writer_must_attach_cluster_rows_somewhere() {
    let mut c = Config::default();
    c.validate_nb_writer().unwrap();
    c.nb_remote = Some("unix:/run/ovn/ovnnb_db.sock".into());
    let e = c.validate_nb_writer().unwrap_err().to_string();
    assert!(
        e.contains("attached to no router or switch") && e.contains("node-router"),
        "{e}"
    );
    // Reading commands (verify, check) still accept it.
    c.validate().unwrap();
    for set in [
        |c: &mut Config| c.northbound.node_router = Some("GR_{node}".into()),
        |c: &mut Config| c.northbound.node_switch = Some("{node}".into()),
        |c: &mut Config| c.northbound.lb_group = Some("clusterLBGroup".into()),
        |c: &mut Config| c.northbound.routers = vec!["lr0".into()],
        |c: &mut Config| c.northbound.switches = vec!["sw0".into()],
    ] {
        let mut c = c.clone();
        set(&mut c);
        c.validate_nb_writer().unwrap();
    }
}

#[test]
fn no_bridges_is_rejected() {
    let c: Config = serde_yaml_ng::from_str("bridges: []").unwrap();
    assert!(c.validate().is_err());
}

#[test]
fn reserved_tables_and_empty_names_are_rejected() {
    let check = |f: &dyn Fn(&mut BridgeConfig)| {
        let mut b = BridgeConfig::default();
        f(&mut b);
        b.validate()
    };
    assert!(check(&|b| b.table = 253).is_ok());
    assert!(check(&|b| b.table = 254).is_err());
    assert!(check(&|b| b.table = 255).is_err());
    assert!(check(&|b| b.name.clear()).is_err());
    assert!(check(&|b| b.uplink = Some(String::new())).is_err());
    assert!(check(&|b| b.patch = Some(String::new())).is_err());
    // Left out: found in the OVS database. Any length: resolved there too.
    assert!(check(&|b| b.patch = None).is_ok());
    assert!(check(&|b| b.patch = Some("a".repeat(15))).is_ok());
    assert!(check(&|b| b.uplink = Some("a".repeat(16))).is_ok());
}

#[test]
fn underlay_with_a_router_mac_is_valid() {
    let c: Config = serde_yaml_ng::from_str(
        "bridges: [{name: br-provider, profile: underlay, uplink: ens4, patch: patch-prov, \
             router-mac: '0A:58:0A:F4:00:01'}]",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.bridges[0].router_mac,
        Some([0x0a, 0x58, 0x0a, 0xf4, 0, 1])
    );
}

#[test]
fn mac_parse_and_format() {
    assert_eq!(parse_mac("02:00:0A:ff:00:01"), Ok([2, 0, 10, 255, 0, 1]));
    assert_eq!(format_mac(&[2, 0, 10, 255, 0, 1]), "02:00:0a:ff:00:01");
    for bad in [
        "",
        "02:00:00:00:00",
        "02:00:00:00:00:01:02",
        "02:00:00:00:00:gg",
    ] {
        assert!(parse_mac(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn target_defaults_to_the_bridge_mgmt_socket() {
    let mut b = BridgeConfig::default();
    assert_eq!(
        b.target(Path::new("/run/openvswitch")),
        "unix:/run/openvswitch/br-ex.mgmt"
    );
    b.target = Some("tcp:127.0.0.1:6653".into());
    assert_eq!(
        b.target(Path::new("/run/openvswitch")),
        "tcp:127.0.0.1:6653"
    );
}

#[test]
fn ovs_db_defaults_to_the_rundir_socket() {
    let mut c = Config {
        ovs_rundir: PathBuf::from("/run/openvswitch"),
        ..Config::default()
    };
    assert_eq!(c.ovs_db(), "unix:/run/openvswitch/db.sock");
    c.ovs_db = Some("tcp:127.0.0.1:6640".into());
    assert_eq!(c.ovs_db(), "tcp:127.0.0.1:6640");
    let y: Config = serde_yaml_ng::from_str("ovs-db: unix:/x/db.sock").unwrap();
    assert_eq!(y.ovs_db.as_deref(), Some("unix:/x/db.sock"));
    assert_eq!(BridgeConfig::default().uplink, None);
    assert_eq!(BridgeConfig::default().patch, None);
}

#[test]
fn load_reads_a_file_and_rejects_unknown_bridge_keys() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("vipflow.yaml");
    std::fs::write(&p, "node-name: node-a\ncookie-prefix: 32543\n").unwrap();
    let c = Config::load(&p).unwrap();
    assert_eq!((c.node_name.as_str(), c.cookie_prefix), ("node-a", 0x7f1f));
    std::fs::write(&p, "bridges: [{name: br-ex, vlna: 5}]\n").unwrap();
    assert!(matches!(Config::load(&p), Err(ConfigError::Parse { .. })));
    assert!(matches!(
        Config::load(&dir.path().join("missing.yaml")),
        Err(ConfigError::Read { .. })
    ));
}
