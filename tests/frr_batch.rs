//! FRR takes the batches vipflow makes ([`vipflow::plan::bgp::frr_batch`]): applied by the
//! agent's own driver ([`vipflow::reconcile::frr::Vtysh`], `vtysh -f`) to a real bgpd, what
//! bgpd originates, read back by the driver from FRR's JSON, is exactly the planned networks,
//! after additions, withdrawals and a batch with a stale withdrawal in it.

use std::collections::BTreeSet;
use testkit::frr::Frr;
use vipflow::plan::bgp::frr_batch;
use vipflow::reconcile::frr::Vtysh;

const ASN: u32 = 64513;

fn nets(v: &[&str]) -> BTreeSet<ipnet::IpNet> {
    v.iter().map(|s| s.parse().expect("a prefix")).collect()
}

#[tokio::test]
async fn frr_takes_every_batch_and_holds_exactly_the_planned_networks() {
    let ns = format!("vf-frr-{}", std::process::id());
    let config = format!(
        "frr defaults datacenter\nrouter bgp {ASN}\n bgp router-id 10.255.0.1\n no bgp network import-check\n"
    );
    let Some(frr) = Frr::start(&ns, &config) else {
        eprintln!("SKIPPED: needs root, network namespaces and FRR");
        return;
    };
    let steps = [
        nets(&["198.51.100.1/32", "198.51.100.2/32", "2001:db8::1/128"]),
        nets(&["198.51.100.2/32", "198.51.100.3/32", "2001:db8::2/128"]),
        nets(&[]),
    ];
    let vtysh = Vtysh::new(frr.path());
    let networks = || async { vtysh.originated().await.expect("read back") };
    let mut held = BTreeSet::new();
    for want in steps {
        let batch = frr_batch(ASN, &held, &want).expect("a change");
        vtysh
            .apply(&batch)
            .await
            .unwrap_or_else(|e| panic!("FRR refused {batch}: {e}"));
        let start = std::time::Instant::now();
        while networks().await != want {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "FRR holds {:?}, planned {want:?}",
                networks().await
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        held = want;
    }
    // A withdrawal of a network FRR does not have (a stale view) does not hold back the rest.
    let stale = nets(&["198.51.100.9/32"]);
    let want = nets(&["198.51.100.5/32"]);
    let batch = frr_batch(ASN, &stale, &want).expect("a change");
    let refused = vtysh.apply(&batch).await;
    println!("a batch with a stale withdrawal: {refused:?}");
    let start = std::time::Instant::now();
    while networks().await != want {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "after a stale withdrawal FRR holds {:?}",
            networks().await
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
