//! `vipflow check` on an objects file with VipPools: every pool range inside a Kube-OVN
//! Subnet's cidrBlock that its excludeIps does not cover is reported (exit 1); a covered one is
//! not. No OVS needed.

mod common;

const OBJECTS: &str = r#"apiVersion: v1
kind: List
items:
- apiVersion: vipflow.io/v1alpha1
  kind: VipPool
  metadata: {name: blue}
  spec:
    addresses: ["10.16.200.0/28"]
  status: {assignedIPv4: 1, availableIPv4: 15, assignedIPv6: 0, availableIPv6: 0}
- apiVersion: vipflow.io/v1alpha1
  kind: VipPool
  metadata: {name: green}
  spec:
    addresses: ["10.16.100.10-10.16.100.20"]
- apiVersion: kubeovn.io/v1
  kind: Subnet
  metadata: {name: ovn-default}
  spec:
    cidrBlock: 10.16.0.0/16
    gateway: 10.16.0.1
    excludeIps: ["10.16.0.1", "10.16.100.0..10.16.100.255", "10.16.200.0..10.16.200.7"]
"#;

fn check(objects: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .arg("check")
        .arg("--objects")
        .arg(objects)
        .output()
        .expect("run vipflow check")
}

#[test]
fn check_reports_a_pool_range_a_kube_ovn_subnet_could_hand_to_pods() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    common::write_objects(&path, OBJECTS);
    let out = check(&path);
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert!(
        text.contains(
            "Subnet ovn-default: pool `blue` has 10.16.200.8..10.16.200.15 inside cidrBlock 10.16.0.0/16"
        ),
        "{text}"
    );
    assert!(text.contains("(8 addresses)"), "{text}");
    assert!(!text.contains("green"), "a covered pool is fine: {text}");
    // The pools are read as objects of their own kind: no problem about them.
    assert!(!err.contains("VipPool"), "{err}");
    // Covered whole: nothing to report.
    let fixed = OBJECTS.replace("10.16.200.0..10.16.200.7", "10.16.200.0..10.16.200.15");
    common::write_objects(&path, &fixed);
    let out = check(&path);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn plan_shows_the_allocation_it_would_make() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("objects.yaml");
    let services = r#"- apiVersion: v1
  kind: Service
  metadata: {name: web, namespace: shop}
  spec:
    type: LoadBalancer
    ports: [{port: 80, protocol: TCP}]
- apiVersion: v1
  kind: Service
  metadata: {name: pinned, namespace: shop, annotations: {metallb.io/loadBalancerIPs: 192.0.2.1}}
  spec:
    type: LoadBalancer
    ports: [{port: 443, protocol: TCP}]
"#;
    common::write_objects(&path, &format!("{OBJECTS}{services}"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vipflow"))
        .arg("plan")
        .arg("--objects")
        .arg(&path)
        .output()
        .expect("run vipflow plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("# addresses the elected agent would allocate from the VipPools"),
        "{text}"
    );
    // Pools by name: blue (10.16.200.0/28) before green.
    assert!(
        text.contains("#   shop/web: assigned 10.16.200.0 (pool blue)"),
        "{text}"
    );
    assert!(
        text.contains(
            "#   shop/pinned: no address allocated: requested 192.0.2.1 is in no usable pool"
        ),
        "{text}"
    );
}
