//! Oracle test for the decoder and the text form: flows installed with `ovs-ofctl add-flow` are
//! read back twice, once as `ovs-ofctl dump-flows` text and once as raw MULTIPART_REPLY bytes
//! from the switch decoded by `Message::decode` and rendered by `openflow::text`. The two must
//! agree line for line.
//!
//! A small blocking client is used on purpose: it keeps this test independent of the async
//! connection and exercises only the wire layer.

use openflow::action::{Action, port};
use openflow::instruction::Instruction;
use openflow::multipart::{FlowStatsRequest, MultipartRequestBody};
use openflow::oxm::{OxmField, eth_type, ip_proto};
use openflow::{FlowMod, FlowStats, Hello, Match, Message, MultipartReplyBody, MultipartRequest};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::path::Path;
use testkit::Sandbox;

const PHYS: u32 = 1;
const PATCH: u32 = 2;

fn read_msg(s: &mut UnixStream) -> Vec<u8> {
    let mut buf = vec![0u8; 8];
    s.read_exact(&mut buf).unwrap();
    let len = u16::from_be_bytes([buf[2], buf[3]]) as usize;
    assert!(len >= 8, "bad length {len}");
    buf.resize(len, 0);
    s.read_exact(&mut buf[8..]).unwrap();
    buf
}

/// Every flow of the bridge, as the switch encodes it, decoded by our wire layer.
fn dump_flows_raw(sock: &Path) -> Vec<FlowStats> {
    dump_flows_req(sock, FlowStatsRequest::default())
}

fn dump_flows_req(sock: &Path, filter: FlowStatsRequest) -> Vec<FlowStats> {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&Message::Hello(Hello::of13()).encode(1))
        .unwrap();
    let (hh, hello) = Message::decode(&read_msg(&mut s)).unwrap();
    let Message::Hello(h) = hello else {
        panic!("expected HELLO, got {hello:?}")
    };
    // Without a version bitmap the header's version is the highest supported (OVS sends 1.5
    // and no bitmap), so 1.3 is agreed.
    assert!(
        h.supports(4) || (h.version_bitmap.is_empty() && hh.version >= 4),
        "switch does not offer OpenFlow 1.3: {hh:?} {h:?}"
    );
    let xid = 7;
    let req = Message::MultipartRequest(MultipartRequest::new(MultipartRequestBody::Flow(filter)));
    s.write_all(&req.encode(xid)).unwrap();
    let mut flows = Vec::new();
    loop {
        let bytes = read_msg(&mut s);
        let (h, m) = Message::decode(&bytes).unwrap();
        match m {
            Message::MultipartReply(r) if h.xid == xid => {
                let more = r.more();
                let MultipartReplyBody::Flow(f) = r.body else {
                    panic!("expected a FLOW reply, got {:?}", r.body)
                };
                flows.extend(f);
                if !more {
                    return flows;
                }
            }
            Message::Error(e) => panic!("switch error: {e:?}"),
            // Anything else (an echo request, a port status) is not ours to answer here.
            _ => {}
        }
    }
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with(' '))
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

fn render(flows: &[FlowStats], stats: bool) -> Vec<String> {
    let mut v: Vec<String> = flows
        .iter()
        .map(|f| f.dump_line(stats).to_string())
        .collect();
    v.sort();
    v
}

/// Durations differ between two reads; everything else must be identical.
fn without_duration(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let Some(start) = l.find("duration=") else {
                return l.clone();
            };
            let end = start + l[start..].find(',').unwrap();
            format!("{}duration=X{}", &l[..start], &l[end..])
        })
        .collect()
}

/// One flow of each kind vipflow writes (the README's flow table), plus masks, registers,
/// goto_table, timeouts, flags and the reserved ports.
const FLOWS: &[&str] = &[
    // ARP bypass
    "cookie=0xabcd000000000001,priority=200,in_port=1,arp,arp_op=1,arp_tpa=192.0.2.10,actions=output:LOCAL",
    // ND bypass
    "cookie=0xabcd000000000002,priority=200,in_port=1,icmp6,icmp_type=135,icmp_code=0,nd_target=2001:db8::10,actions=output:LOCAL",
    // VLAN variants
    "cookie=0xabcd000000000003,priority=200,in_port=1,dl_vlan=100,arp,arp_op=1,arp_tpa=192.0.2.11,actions=pop_vlan,output:LOCAL",
    "cookie=0xabcd000000000004,priority=200,in_port=1,dl_vlan=100,icmp6,icmp_type=135,icmp_code=0,nd_target=2001:db8::11,actions=pop_vlan,output:LOCAL",
    // steering v4 and v6, tcp/udp/sctp
    "cookie=0xabcd000000000005,priority=100,in_port=1,tcp,nw_dst=192.0.2.10,tp_dst=80,actions=output:2",
    "cookie=0xabcd000000000006,priority=100,in_port=1,udp,nw_dst=192.0.2.10,tp_dst=53,actions=output:2",
    "cookie=0xabcd000000000007,priority=100,in_port=1,sctp,nw_dst=192.0.2.10,tp_dst=3868,actions=output:2",
    "cookie=0xabcd000000000008,priority=100,in_port=1,tcp6,ipv6_dst=2001:db8::10,tp_dst=443,actions=output:2",
    "cookie=0xabcd000000000009,priority=100,in_port=1,udp6,ipv6_dst=2001:db8::10,tp_dst=53,actions=output:2",
    "cookie=0xabcd00000000000a,priority=100,in_port=1,sctp6,ipv6_dst=2001:db8::10,tp_dst=3868,actions=output:2",
    // return path
    "cookie=0xabcd00000000000b,priority=100,in_port=2,dl_src=02:00:00:00:00:01,tcp,nw_src=192.0.2.10,tp_src=80,actions=output:1",
    "cookie=0xabcd00000000000c,priority=100,in_port=2,dl_src=02:00:00:00:00:01,udp6,ipv6_src=2001:db8::10,tp_src=53,actions=output:1",
    // PMTU v4 and v6
    "cookie=0xabcd00000000000d,priority=100,in_port=1,icmp,nw_dst=192.0.2.10,icmp_type=3,icmp_code=4,actions=output:2",
    "cookie=0xabcd00000000000e,priority=100,in_port=1,icmp6,ipv6_dst=2001:db8::10,icmp_type=2,icmp_code=0,actions=output:2",
    // fragments of VIP traffic (no L4 ports to match), both ways, v4 and v6
    "cookie=0xabcd000000000010,priority=100,in_port=1,ip,nw_dst=192.0.2.10,nw_frag=yes,actions=output:2",
    "cookie=0xabcd000000000011,priority=100,in_port=2,dl_src=02:00:00:00:00:01,ipv6,ipv6_src=2001:db8::10,nw_frag=yes,actions=output:1",
    "cookie=0xabcd000000000012,priority=100,in_port=1,udp,nw_dst=192.0.2.10,nw_frag=first,tp_dst=53,actions=output:2",
    "cookie=0xabcd000000000013,priority=100,in_port=1,ip,nw_dst=192.0.2.11,nw_proto=17,nw_frag=later,actions=output:2",
    // underlay profile
    "cookie=0xabcd00000000000f,priority=100,in_port=1,tcp,nw_dst=192.0.2.10,tp_dst=8080,actions=mod_dl_dst:02:00:00:00:00:99,output:2",
    // masks, registers, metadata, goto_table, write/clear actions
    "table=1,priority=10,reg0=0x1,reg3=0x10/0xf0,ip,nw_src=10.0.0.0/8,nw_dst=10.1.0.0/255.255.0.255,actions=move:NXM_NX_REG0[0..15]->NXM_NX_REG1[0..15],goto_table:2",
    "table=1,priority=11,idle_timeout=30,hard_timeout=60,send_flow_rem,tcp6,ipv6_src=2001:db8::/32,tp_dst=0x1000/0xf000,actions=push_vlan:0x8100,set_field:4196->vlan_vid,group:1,CONTROLLER:65535,IN_PORT,NORMAL,write_metadata:0x5/0xff",
    "table=2,priority=12,dl_vlan=0xffff,reg1=0,metadata=0x0/0xf,actions=clear_actions,write_actions(output:3),goto_table:3",
    "table=2,priority=13,vlan_tci=0x1000/0x1000,dl_dst=01:00:00:00:00:00/01:00:00:00:00:00,ip,nw_proto=47,actions=drop",
    "table=2,priority=5,in_port=LOCAL,dl_type=0x88cc,actions=output:CONTROLLER,move:OXM_OF_METADATA[0..31]->NXM_NX_REG2[],move:NXM_OF_ETH_SRC[]->NXM_OF_ETH_DST[]",
    "table=3,priority=5,tun_id=0x5,arp,arp_spa=10.0.0.0/24,arp_sha=00:11:22:33:44:55,arp_tha=00:00:00:00:00:00/ff:00:00:00:00:00,arp_op=2,actions=set_field:2->arp_op",
    "table=3,priority=6,icmp6,icmp_type=136,nd_target=fe80::/64,nd_tll=00:11:22:33:44:55,ip_dscp=10,ip_ecn=1,actions=dec_ttl,mod_nw_ttl:5,set_queue:3",
    "table=3,priority=7,udp,tp_src=0,tp_dst=1/1,actions=output:65279",
    "table=4,check_overlap,dl_vlan=5,dl_vlan_pcp=3,ipv6,ipv6_dst=::1.2.3.4,ipv6_label=0x12345,actions=set_field:fe80::1->ipv6_src,set_field:5->reg0",
    "table=4,priority=1,dl_vlan_pcp=7,ipv6,ipv6_src=::ffff:1.2.3.4,ipv6_dst=2001:db8:0:1::/ffff:ffff:0:ffff::,actions=output:1",
    "table=200,priority=0,actions=drop",
];

#[test]
fn dump_flows_matches_our_decoding_and_text() {
    let sb = Sandbox::openflow_only();
    sb.ofctl(&["add-group", "br-ex", "group_id=1,type=all,bucket=output:1"]);
    for f in FLOWS {
        sb.ofctl(&["add-flow", "br-ex", f]);
    }
    let ours = dump_flows_raw(&sb.mgmt_sock("br-ex"));
    // Ours plus the bridge's default NORMAL flow.
    assert_eq!(ours.len(), FLOWS.len() + 1);

    let theirs = sorted_lines(&sb.ofctl(&["--no-names", "--no-stats", "dump-flows", "br-ex"]));
    let mine = render(&ours, false);
    assert_eq!(theirs.len(), mine.len());
    for (t, m) in theirs.iter().zip(&mine) {
        assert_eq!(m, t, "our --no-stats line differs from ovs-ofctl");
    }

    let theirs = sorted_lines(&sb.ofctl(&["--no-names", "dump-flows", "br-ex"]));
    let ours = dump_flows_raw(&sb.mgmt_sock("br-ex"));
    let mine = without_duration(&render(&ours, true));
    let theirs = without_duration(&theirs);
    let (mut theirs, mut mine) = (theirs, mine);
    theirs.sort();
    mine.sort();
    assert_eq!(theirs.len(), mine.len());
    for (t, m) in theirs.iter().zip(&mine) {
        assert_eq!(m, t, "our dump-flows line differs from ovs-ofctl");
    }
    // A cookie/mask filter returns exactly the flows with our prefix.
    let ours_only = dump_flows_req(
        &sb.mgmt_sock("br-ex"),
        FlowStatsRequest::by_cookie(0xabcd_0000_0000_0000, 0xffff_0000_0000_0000),
    );
    assert_eq!(ours_only.len(), 19);
    assert!(ours_only.iter().all(|f| f.cookie >> 48 == 0xabcd));
    // Spot checks, so a test that compared two empty lists could not pass.
    assert!(mine.contains(
        &" cookie=0xabcd000000000001, duration=X, table=0, n_packets=0, n_bytes=0, priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1 actions=LOCAL".to_owned()
    ));
    let no_stats = render(&ours, false);
    assert!(no_stats.contains(
        &" cookie=0xabcd000000000010, priority=100,ip,in_port=1,nw_dst=192.0.2.10,nw_frag=yes actions=output:2".to_owned()
    ));
    assert!(no_stats.contains(
        &" cookie=0xabcd00000000000f, priority=100,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=8080 actions=set_field:02:00:00:00:00:99->eth_dst,output:2".to_owned()
    ));
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn out(p: u32) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(vec![Action::output(p)])]
}

/// The flows vipflow plans, built with the typed constructors (one per row of the flow table).
fn planned() -> Vec<FlowMod> {
    use OxmField as O;
    let vip = v4("192.0.2.10");
    let vip6 = v6("2001:db8::10");
    let brmac = [2, 0, 0, 0, 0, 1];
    let m = Match::new;
    let c = |n: u64| 0xabcd_0000_0000_0000 | n;
    vec![
        FlowMod::add(
            0,
            200,
            c(1),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::ARP))
                .with(O::arp_op(1))
                .with(O::arp_tpa(vip)),
            out(port::LOCAL),
        ),
        FlowMod::add(
            0,
            200,
            c(2),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::icmpv6_type(135))
                .with(O::icmpv6_code(0))
                .with(O::ipv6_nd_target(vip6)),
            out(port::LOCAL),
        ),
        FlowMod::add(
            0,
            200,
            c(3),
            m().with(O::in_port(PHYS))
                .with(O::vlan_vid(100))
                .with(O::eth_type(eth_type::ARP))
                .with(O::arp_op(1))
                .with(O::arp_tpa(vip)),
            vec![Instruction::ApplyActions(vec![
                Action::PopVlan,
                Action::output(port::LOCAL),
            ])],
        ),
        FlowMod::add(
            0,
            100,
            c(4),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_dst(vip))
                .with(O::tcp_dst(80)),
            out(PATCH),
        ),
        FlowMod::add(
            0,
            100,
            c(5),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::UDP))
                .with(O::ipv6_dst(vip6))
                .with(O::udp_dst(53)),
            out(PATCH),
        ),
        FlowMod::add(
            0,
            100,
            c(6),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::SCTP))
                .with(O::ipv4_dst(vip))
                .with(O::sctp_dst(3868)),
            out(PATCH),
        ),
        FlowMod::add(
            0,
            100,
            c(7),
            m().with(O::in_port(PATCH))
                .with(O::eth_src(brmac))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_src(vip))
                .with(O::tcp_src(80)),
            out(PHYS),
        ),
        FlowMod::add(
            0,
            100,
            c(8),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::ICMP))
                .with(O::ipv4_dst(vip))
                .with(O::icmpv4_type(3))
                .with(O::icmpv4_code(4)),
            out(PATCH),
        ),
        FlowMod::add(
            0,
            100,
            c(9),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::ipv6_dst(vip6))
                .with(O::icmpv6_type(2))
                .with(O::icmpv6_code(0)),
            out(PATCH),
        ),
        FlowMod::add(
            0,
            100,
            c(10),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_dst(vip))
                .with(O::tcp_dst(8080)),
            vec![Instruction::ApplyActions(vec![
                Action::SetField(O::eth_dst([2, 0, 0, 0, 0, 0x99])),
                Action::output(PATCH),
            ])],
        ),
        FlowMod {
            idle_timeout: 30,
            hard_timeout: 60,
            flags: openflow::flow_mod::flow_mod_flags::SEND_FLOW_REM,
            ..FlowMod::add(
                1,
                10,
                c(11),
                m().with(O::reg(0, 1))
                    .with(O::eth_type(eth_type::IPV4))
                    .with(O::ipv4_src_masked(v4("10.0.0.0"), v4("255.0.0.0")))
                    .with(O::ipv4_dst_masked(v4("10.1.0.0"), v4("255.255.0.255"))),
                vec![
                    Instruction::ApplyActions(vec![Action::RegMove {
                        n_bits: 16,
                        src_ofs: 0,
                        dst_ofs: 0,
                        src: openflow::oxm::oxm_header(openflow::oxm::OXM_CLASS_NXM1, 0, 4),
                        dst: openflow::oxm::oxm_header(openflow::oxm::OXM_CLASS_NXM1, 1, 4),
                    }]),
                    Instruction::GotoTable(2),
                ],
            )
        },
        // A neighbor solicitation turned into an advertisement in the switch: the Ericsson
        // ND fields, and a resubmit so that the target link-layer address can be set once the
        // packet is an advertisement.
        FlowMod::add(
            0,
            10,
            c(12),
            m().with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::icmpv6_type(135))
                .with(O::icmpv6_code(0))
                .with(O::ipv6_nd_target("2001:db8::10".parse().unwrap())),
            vec![Instruction::ApplyActions(vec![
                Action::SetField(O::icmpv6_type(136)),
                Action::SetField(O::nd_reserved(0x6000_0000)),
                Action::SetField(O::nd_options_type(2)),
                Action::SetField(O::reg(0, 7)),
                Action::Resubmit {
                    in_port: openflow::action::NX_RESUBMIT_IN_PORT,
                    table: 0,
                },
            ])],
        ),
        FlowMod::add(
            0,
            10,
            c(13),
            m().with(O::in_port(PHYS))
                .with(O::reg(0, 7))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::icmpv6_type(136))
                .with(O::icmpv6_code(0))
                .with(O::ipv6_nd_target("2001:db8::10".parse().unwrap())),
            vec![Instruction::ApplyActions(vec![
                Action::SetField(O::ipv6_nd_tll([2, 0, 0, 0, 0, 0x10])),
                Action::output(openflow::action::port::IN_PORT),
            ])],
        ),
    ]
}

#[test]
fn flow_mod_text_is_accepted_by_add_flow_and_round_trips() {
    let sb = Sandbox::openflow_only();
    let planned = planned();
    for fm in &planned {
        sb.ofctl(&["add-flow", "br-ex", &fm.to_string()]);
    }
    let flows = dump_flows_raw(&sb.mgmt_sock("br-ex"));
    // What the switch stored is what we planned: same table, priority, normalized match and
    // instructions. That is the comparison reconcile makes.
    for fm in &planned {
        let got = flows
            .iter()
            .find(|f| f.cookie == fm.cookie)
            .unwrap_or_else(|| panic!("flow {fm} not installed"));
        assert_eq!(got.table_id, fm.table_id, "{fm}");
        assert_eq!(got.priority, fm.priority, "{fm}");
        assert_eq!(got.match_.normalized(), fm.match_.normalized(), "{fm}");
        assert_eq!(got.instructions, fm.instructions, "{fm}");
        assert_eq!(
            (got.idle_timeout, got.hard_timeout, got.flags),
            (fm.idle_timeout, fm.hard_timeout, fm.flags),
            "{fm}"
        );
    }
    let theirs = sorted_lines(&sb.ofctl(&["--no-names", "--no-stats", "dump-flows", "br-ex"]));
    assert_eq!(theirs, render(&flows, false));
    assert_eq!(
        planned[0].to_string(),
        "cookie=0xabcd000000000001,table=0,priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1,actions=LOCAL"
    );
    // A delete by cookie prints as del-flows syntax and removes exactly our flows.
    let del = FlowMod::delete_by_cookie(0xabcd_0000_0000_0000, 0xffff_0000_0000_0000);
    assert_eq!(
        del.to_string(),
        "cookie=0xabcd000000000000/0xffff000000000000"
    );
    sb.ofctl(&["del-flows", "br-ex", &del.to_string()]);
    let left = dump_flows_raw(&sb.mgmt_sock("br-ex"));
    assert_eq!(left.len(), 1, "only the default flow remains: {left:?}");
    assert_eq!(left[0].cookie, 0);
}
