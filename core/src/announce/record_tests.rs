//! Tests of [`super`]: the message read back, and for each situation which node writes what.

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn n(s: &str) -> NodeName {
    NodeName::from(s)
}

fn owners(pairs: &[(&str, &str)]) -> imbl::OrdMap<IpAddr, NodeName> {
    pairs.iter().map(|(v, o)| (ip(v), n(o))).collect()
}

const NODES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

fn live(names: &[&str]) -> Vec<NodeName> {
    let mut v: Vec<NodeName> = names.iter().map(|s| n(s)).collect();
    v.sort();
    v
}

/// Every node's plan for one Service with `vips` and the record `current`.
fn each_node(
    owners: &imbl::OrdMap<IpAddr, NodeName>,
    live: &[NodeName],
    vips: &[&str],
    current: Option<&str>,
) -> Vec<(&'static str, RecordPlan)> {
    let key = ServiceKey::new("shop", "web");
    let vips: Vec<IpAddr> = vips.iter().map(|v| ip(v)).collect();
    let cur: HashMap<ServiceKey, &str> = current.map(|m| (key.clone(), m)).into_iter().collect();
    NODES
        .iter()
        .map(|node| {
            let view = View { node, owners, live };
            (*node, plan(&view, [(&key, vips.as_slice())], &cur))
        })
        .collect()
}

/// The one node that writes, and what; panics if more than one does.
fn writer(plans: &[(&'static str, RecordPlan)]) -> Option<(&'static str, Option<String>)> {
    let writers: Vec<(&str, Option<String>)> = plans
        .iter()
        .flat_map(|(node, p)| {
            p.writes
                .iter()
                .map(move |w| (*node, w.message.as_deref().map(String::from)))
        })
        .collect();
    assert!(writers.len() <= 1, "more than one writer: {writers:?}");
    writers.into_iter().next()
}

#[test]
fn a_message_reads_back_as_written_and_junk_is_an_error_not_a_panic() {
    let r = Record {
        lines: vec![
            Line {
                vip: ip("192.0.2.1"),
                node: n("node-b"),
                from: Some(n("node-a")),
            },
            Line {
                vip: ip("2001:db8::1"),
                node: n("node-c.example"),
                from: None,
            },
        ],
    };
    let m = r.message();
    assert_eq!(
        m,
        "192.0.2.1 by node-b (from node-a), 2001:db8::1 by node-c.example"
    );
    assert_eq!(Record::parse(&m), Ok(r));
    assert_eq!(Record::parse(""), Ok(Record::default()));
    for junk in [
        "192.0.2.1",
        "192.0.2.1 by ",
        "192.0.2.1 by Node_A",
        "300.0.2.1 by node-a",
        "192.0.2.1 by node-a (from node-b",
        "192.0.2.1 by node-a (from )",
        "by node-a",
        "\u{0}\u{ffff} by \u{1}",
    ] {
        assert!(Record::parse(junk).is_err(), "{junk:?}");
    }
}

#[test]
fn the_first_owner_writes_a_new_record_and_nobody_writes_a_true_one() {
    let o = owners(&[("192.0.2.1", "node-b")]);
    let l = live(&NODES);
    let plans = each_node(&o, &l, &["192.0.2.1"], None);
    assert_eq!(
        writer(&plans),
        Some(("node-b", Some("192.0.2.1 by node-b".into())))
    );
    // Only the owner announces it, and from nowhere.
    for (node, p) in &plans {
        let here: Vec<_> = p.here.iter().flat_map(|(_, v)| v.clone()).collect();
        if *node == "node-b" {
            assert_eq!(here, [(ip("192.0.2.1"), None)]);
        } else {
            assert!(here.is_empty());
        }
    }
    assert_eq!(
        writer(&each_node(
            &o,
            &l,
            &["192.0.2.1"],
            Some("192.0.2.1 by node-b")
        )),
        None
    );
}

#[test]
fn on_a_move_the_new_owner_writes_where_it_came_from_and_keeps_saying_so_after() {
    let o = owners(&[("192.0.2.1", "node-c")]);
    // node-b died: it is not live.
    let l = live(&["node-a", "node-c", "node-d"]);
    let plans = each_node(&o, &l, &["192.0.2.1"], Some("192.0.2.1 by node-b"));
    assert_eq!(
        writer(&plans),
        Some(("node-c", Some("192.0.2.1 by node-c (from node-b)".into())))
    );
    let here_c = |plans: &[(&str, RecordPlan)]| plans[2].1.here.clone();
    let said = here_c(&plans);
    assert_eq!(said[0].1, [(ip("192.0.2.1"), Some(n("node-b")))]);
    // Written, and after a restart with the record read back: nothing to write, the same said.
    let after = each_node(
        &o,
        &l,
        &["192.0.2.1"],
        Some("192.0.2.1 by node-c (from node-b)"),
    );
    assert_eq!(writer(&after), None);
    assert_eq!(here_c(&after), said);
    // It moves on: from the last owner, not the one before.
    let o2 = owners(&[("192.0.2.1", "node-a")]);
    assert_eq!(
        writer(&each_node(
            &o2,
            &l,
            &["192.0.2.1"],
            Some("192.0.2.1 by node-c (from node-b)")
        )),
        Some(("node-a", Some("192.0.2.1 by node-a (from node-c)".into())))
    );
}

#[test]
fn of_two_vips_on_two_nodes_the_owner_of_the_one_that_moved_writes_both() {
    let o = owners(&[("192.0.2.1", "node-a"), ("2001:db8::1", "node-c")]);
    let l = live(&NODES);
    let vips = ["192.0.2.1", "2001:db8::1"];
    let plans = each_node(
        &o,
        &l,
        &vips,
        Some("192.0.2.1 by node-a, 2001:db8::1 by node-b"),
    );
    assert_eq!(
        writer(&plans),
        Some((
            "node-c",
            Some("192.0.2.1 by node-a, 2001:db8::1 by node-c (from node-b)".into())
        ))
    );
    // Each owner announces its own.
    assert_eq!(plans[0].1.here[0].1, [(ip("192.0.2.1"), None)]);
    assert_eq!(
        plans[2].1.here[0].1,
        [(ip("2001:db8::1"), Some(n("node-b")))]
    );
    // One of them stops being announced: the owner of the first one left writes.
    let only = owners(&[("2001:db8::1", "node-c")]);
    assert_eq!(
        writer(&each_node(
            &only,
            &l,
            &vips,
            Some("192.0.2.1 by node-a, 2001:db8::1 by node-c")
        )),
        Some(("node-c", Some("2001:db8::1 by node-c".into())))
    );
}

#[test]
fn a_record_of_vips_no_one_announces_is_removed_by_its_live_node_else_by_one_live_node() {
    let none = owners(&[]);
    // Its node gave the VIP up and lives: it removes its record.
    let plans = each_node(
        &none,
        &live(&NODES),
        &["192.0.2.1"],
        Some("192.0.2.1 by node-b"),
    );
    assert_eq!(writer(&plans), Some(("node-b", None)));
    assert!(plans.iter().all(|(_, p)| p.here.is_empty()));
    // Its node died: exactly one live node removes it, the Service's scribe.
    let l = live(&["node-a", "node-c", "node-d"]);
    let plans = each_node(&none, &l, &["192.0.2.1"], Some("192.0.2.1 by node-b"));
    let key = ServiceKey::new("shop", "web");
    let scribe = scribe(&key, &l).unwrap().to_string();
    assert_eq!(
        writer(&plans).map(|(n, m)| (n.to_string(), m)),
        Some((scribe, None))
    );
    // No record, nothing announced: nothing to do.
    assert_eq!(writer(&each_node(&none, &l, &["192.0.2.1"], None)), None);
    // Nobody live: nobody can.
    assert_eq!(
        writer(&each_node(
            &none,
            &[],
            &["192.0.2.1"],
            Some("192.0.2.1 by node-b")
        )),
        None
    );
}

#[test]
fn a_record_on_a_service_without_vips_goes_and_an_unreadable_one_is_replaced() {
    let l = live(&NODES);
    let none = owners(&[]);
    let web = ServiceKey::new("shop", "web");
    let cur: HashMap<ServiceKey, &str> = [(web.clone(), "192.0.2.1 by node-d")].into();
    // The Service lost its VIPs: it is among no Service's VIPs, only among the records.
    for node in NODES {
        let view = View {
            node,
            owners: &none,
            live: &l,
        };
        let p = plan(&view, std::iter::empty(), &cur);
        let want: Vec<Want> = if node == "node-d" {
            vec![Want {
                service: web.clone(),
                message: None,
            }]
        } else {
            Vec::new()
        };
        assert_eq!(p.writes, want, "{node}");
    }
    // Written by hand: the owner writes it over; with nothing to announce, it goes.
    let o = owners(&[("192.0.2.1", "node-a")]);
    assert_eq!(
        writer(&each_node(&o, &l, &["192.0.2.1"], Some("nonsense"))),
        Some(("node-a", Some("192.0.2.1 by node-a".into())))
    );
    let removed = writer(&each_node(&none, &l, &["192.0.2.1"], Some("nonsense")));
    assert!(matches!(removed, Some((_, None))), "{removed:?}");
}

#[test]
fn for_many_services_and_owners_at_most_one_node_writes_each_record() {
    let l = live(&NODES);
    let vip = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(0xc000_0200 + i));
    // 200 Services of one or two VIPs, owners spread, records that say all sorts.
    let mut services: Vec<(ServiceKey, Vec<IpAddr>)> = Vec::new();
    let mut o = imbl::OrdMap::new();
    let mut current_text: Vec<(ServiceKey, String)> = Vec::new();
    for i in 0..200u32 {
        let key = ServiceKey::new("shop", &format!("s{i}"));
        let vips: Vec<IpAddr> = (0..1 + i % 2).map(|j| vip(i * 2 + j)).collect();
        for (j, v) in vips.iter().enumerate() {
            if !(i + j as u32).is_multiple_of(7) {
                o.insert(*v, n(NODES[((i as usize) + j) % 4]));
            }
        }
        match i % 3 {
            0 => {}
            1 => current_text.push((key.clone(), format!("{} by node-b", vips[0]))),
            _ => current_text.push((key.clone(), "junk".into())),
        }
        services.push((key, vips));
    }
    let cur: HashMap<ServiceKey, &str> = current_text
        .iter()
        .map(|(k, m)| (k.clone(), m.as_str()))
        .collect();
    let mut writers: HashMap<ServiceKey, Vec<&str>> = HashMap::new();
    for node in NODES {
        let view = View {
            node,
            owners: &o,
            live: &l,
        };
        let p = plan(&view, services.iter().map(|(k, v)| (k, v.as_slice())), &cur);
        for w in p.writes {
            writers.entry(w.service).or_default().push(node);
        }
    }
    for (k, ws) in &writers {
        assert_eq!(ws.len(), 1, "{k}: {ws:?}");
    }
    // Every Service whose record is not what it should be has its writer.
    for (key, vips) in &services {
        let announced = vips.iter().any(|v| o.contains_key(v));
        let has = cur.get(key);
        // A readable record here says that the first VIP alone is announced, by node-b.
        let owned: Vec<(IpAddr, &str)> = (vips.iter())
            .filter_map(|v| Some((*v, &**o.get(v)?)))
            .collect();
        let needs = match has {
            None => announced,
            Some(m) => Record::parse(m).is_err() || owned != [(vips[0], "node-b")],
        };
        assert_eq!(writers.contains_key(key), needs, "{key} {has:?}");
    }
}
