//! Golden tests: every message vipflow emits is encoded here, decoded by the real
//! `ovs-ofctl ofp-print`, and the text compared with what is written below. A wrong byte in
//! our encoding shows up as a decode error or a different text. Each case also checks that our
//! own decoder reads the bytes back to the same message.
//!
//! `GOLDEN_PRINT=1 cargo test --test golden -- --nocapture` prints ofp-print's output for
//! every case (useful when adding one; the expected text must still be reviewed by hand).

use openflow::action::{Action, port};
use openflow::bundle::{BundleAdd, BundleCtrl, BundleCtrlType, bundle_flags};
use openflow::flow_mod::{FlowModCommand, flow_mod_flags};
use openflow::instruction::Instruction;
use openflow::message::{ErrorMsg, PacketIn, PacketOut, PortStatus, SwitchConfig, SwitchFeatures};
use openflow::multipart::{AggregateStats, Desc, FlowStatsRequest, MultipartRequestBody, mp_type};
use openflow::oxm::{OXM_CLASS_NXM1, OxmField, eth_type, ip_proto, oxm_header};
use openflow::port::{Port, PortReason, port_state};
use openflow::{
    FlowMod, FlowStats, Hello, Match, Message, MultipartReply, MultipartReplyBody, MultipartRequest,
};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn ofp_print(bytes: &[u8]) -> String {
    let out = Command::new("ovs-ofctl")
        .args(["ofp-print", &hex(bytes)])
        .output()
        .expect("run ovs-ofctl");
    assert!(
        out.status.success(),
        "ofp-print failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Encode with `xid`, check our decoder reads it back unchanged, and compare ofp-print's text.
fn golden(msg: Message, xid: u32, expected: &str) {
    let bytes = msg.encode(xid);
    let (h, back) = Message::decode(&bytes).unwrap();
    assert_eq!(h.xid, xid);
    assert_eq!(h.length as usize, bytes.len());
    assert_eq!(back, msg, "our decoder disagrees with our encoder");
    let text = ofp_print(&bytes);
    if std::env::var_os("GOLDEN_PRINT").is_some() {
        eprintln!("---- {}\n{text}", hex(&bytes));
    }
    assert_eq!(
        text.trim_end(),
        expected.trim_end(),
        "bytes: {}",
        hex(&bytes)
    );
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}
fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}
fn apply(a: Vec<Action>) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(a)]
}
fn reg_move(src: u8, dst: u8, n_bits: u16) -> Action {
    Action::RegMove {
        n_bits,
        src_ofs: 0,
        dst_ofs: 0,
        src: oxm_header(OXM_CLASS_NXM1, src, 4),
        dst: oxm_header(OXM_CLASS_NXM1, dst, 4),
    }
}

const COOKIE: u64 = 0xabcd_0000_0000_0001;
const PHYS: u32 = 1;
const PATCH: u32 = 2;

// ---- session messages -------------------------------------------------------------------

#[test]
fn hello() {
    golden(
        Message::Hello(Hello::of13()),
        1,
        concat!("OFPT_HELLO (OF1.3) (xid=0x1):\n", " version bitmap: 0x04",),
    );
    golden(
        Message::Hello(Hello {
            version_bitmap: vec![(1 << 1) | (1 << 4)],
        }),
        2,
        concat!(
            "OFPT_HELLO (OF1.3) (xid=0x2):\n",
            " version bitmap: 0x01, 0x04",
        ),
    );
}

#[test]
fn error() {
    let failed = Message::FeaturesRequest.encode(9);
    golden(
        Message::Error(ErrorMsg {
            err_type: 1,
            code: 1,
            experimenter: None,
            data: failed.clone(),
        }),
        9,
        concat!(
            "OFPT_ERROR (OF1.3) (xid=0x9): OFPBRC_BAD_TYPE\n",
            "OFPT_FEATURES_REQUEST (OF1.3) (xid=0x9):",
        ),
    );
    // ONF bundle errors are experimenter errors (ONFERR_ET_BUNDLE_TIMEOUT... 2300+n).
    golden(
        Message::Error(ErrorMsg {
            err_type: 0xffff,
            code: 2300,
            experimenter: Some(0x4f4e_4600),
            data: failed,
        }),
        9,
        concat!(
            "OFPT_ERROR (OF1.3) (xid=0x9): OFPBFC_UNKNOWN\n",
            "OFPT_FEATURES_REQUEST (OF1.3) (xid=0x9):",
        ),
    );
}

#[test]
fn echo() {
    golden(
        Message::EchoRequest(b"vipflow".to_vec()),
        3,
        concat!(
            "OFPT_ECHO_REQUEST (OF1.3) (xid=0x3): 7 bytes of payload\n",
            "00000000  76 69 70 66 6c 6f 77                            |vipflow         |",
        ),
    );
    golden(
        Message::EchoReply(b"vipflow".to_vec()),
        3,
        concat!(
            "OFPT_ECHO_REPLY (OF1.3) (xid=0x3): 7 bytes of payload\n",
            "00000000  76 69 70 66 6c 6f 77                            |vipflow         |",
        ),
    );
    golden(
        Message::EchoRequest(Vec::new()),
        4,
        "OFPT_ECHO_REQUEST (OF1.3) (xid=0x4): 0 bytes of payload",
    );
}

#[test]
fn features() {
    golden(
        Message::FeaturesRequest,
        5,
        "OFPT_FEATURES_REQUEST (OF1.3) (xid=0x5):",
    );
    golden(
        Message::FeaturesReply(SwitchFeatures {
            datapath_id: 0x0000_0200_0000_0001,
            n_buffers: 0,
            n_tables: 254,
            auxiliary_id: 0,
            capabilities: 0x4f,
        }),
        5,
        concat!(
            "OFPT_FEATURES_REPLY (OF1.3) (xid=0x5): dpid:0000020000000001\n",
            "n_tables:254, n_buffers:0\n",
            "capabilities: FLOW_STATS TABLE_STATS PORT_STATS GROUP_STATS QUEUE_STATS",
        ),
    );
}

#[test]
fn config() {
    golden(
        Message::GetConfigRequest,
        6,
        "OFPT_GET_CONFIG_REQUEST (OF1.3) (xid=0x6):",
    );
    golden(
        Message::GetConfigReply(SwitchConfig {
            flags: 0,
            miss_send_len: 0xffff,
        }),
        6,
        "OFPT_GET_CONFIG_REPLY (OF1.3) (xid=0x6): frags=normal miss_send_len=65535",
    );
    golden(
        Message::SetConfig(SwitchConfig {
            flags: 0,
            miss_send_len: 128,
        }),
        7,
        "OFPT_SET_CONFIG (OF1.3) (xid=0x7): frags=normal miss_send_len=128",
    );
}

#[test]
fn barrier() {
    golden(
        Message::BarrierRequest,
        8,
        "OFPT_BARRIER_REQUEST (OF1.3) (xid=0x8):",
    );
    golden(
        Message::BarrierReply,
        8,
        "OFPT_BARRIER_REPLY (OF1.3) (xid=0x8):",
    );
}

// ---- flow mods ----------------------------------------------------------------------------

/// A FLOW_MOD golden case; also checks that our own text form of the match and the
/// instructions is what ofp-print shows for them.
fn fm(f: FlowMod, expected: &str) {
    let mut m = Vec::new();
    if f.priority != openflow::text::DEFAULT_PRIORITY {
        m.push(format!("priority={}", f.priority));
    }
    m.extend(f.match_.text_parts());
    let ours = format!(
        "{}{}actions={}",
        m.join(","),
        if m.is_empty() { "" } else { " " },
        openflow::Instructions(&f.instructions)
    );
    let (head, acts) = ours.split_once("actions=").unwrap();
    assert!(
        expected.contains(head.trim_end()),
        "match text {head:?} not in {expected:?}"
    );
    assert!(
        expected.contains(&format!("actions={acts}")),
        "actions text {acts:?} not in {expected:?}"
    );
    golden(Message::FlowMod(f), 0x10, expected);
}

#[test]
fn flow_mod_design_rows() {
    use OxmField as O;
    let vip = v4("192.0.2.10");
    let vip6 = v6("2001:db8::10");
    let local = || apply(vec![Action::output(port::LOCAL)]);
    let patch = || apply(vec![Action::output(PATCH)]);
    // ARP bypass
    fm(
        FlowMod::add(
            0,
            200,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::ARP))
                .with(O::arp_op(1))
                .with(O::arp_tpa(vip)),
            local(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1 cookie:0xabcd000000000001 actions=LOCAL",
    );
    // ND bypass
    fm(
        FlowMod::add(
            0,
            200,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::icmpv6_type(135))
                .with(O::icmpv6_code(0))
                .with(O::ipv6_nd_target(vip6)),
            local(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=200,icmp6,in_port=1,icmp_type=135,icmp_code=0,nd_target=2001:db8::10 cookie:0xabcd000000000001 actions=LOCAL",
    );
    // VLAN variant
    fm(
        FlowMod::add(
            0,
            200,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::vlan_vid(100))
                .with(O::eth_type(eth_type::ARP))
                .with(O::arp_op(1))
                .with(O::arp_tpa(vip)),
            apply(vec![Action::PopVlan, Action::output(port::LOCAL)]),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=200,arp,in_port=1,dl_vlan=100,arp_tpa=192.0.2.10,arp_op=1 cookie:0xabcd000000000001 actions=pop_vlan,LOCAL",
    );
    // steering: tcp v4, udp v6, sctp v4
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_dst(vip))
                .with(O::tcp_dst(80)),
            patch(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80 cookie:0xabcd000000000001 actions=output:2",
    );
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::UDP))
                .with(O::ipv6_dst(vip6))
                .with(O::udp_dst(53)),
            patch(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,udp6,in_port=1,ipv6_dst=2001:db8::10,tp_dst=53 cookie:0xabcd000000000001 actions=output:2",
    );
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::SCTP))
                .with(O::ipv4_dst(vip))
                .with(O::sctp_dst(3868)),
            patch(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,sctp,in_port=1,nw_dst=192.0.2.10,tp_dst=3868 cookie:0xabcd000000000001 actions=output:2",
    );
    // return path
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PATCH))
                .with(O::eth_src([2, 0, 0, 0, 0, 1]))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_src(vip))
                .with(O::tcp_src(80)),
            apply(vec![Action::output(PHYS)]),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,tcp,in_port=2,dl_src=02:00:00:00:00:01,nw_src=192.0.2.10,tp_src=80 cookie:0xabcd000000000001 actions=output:1",
    );
    // PMTU v4 and v6
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::ICMP))
                .with(O::ipv4_dst(vip))
                .with(O::icmpv4_type(3))
                .with(O::icmpv4_code(4)),
            patch(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,icmp,in_port=1,nw_dst=192.0.2.10,icmp_type=3,icmp_code=4 cookie:0xabcd000000000001 actions=output:2",
    );
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::ipv6_dst(vip6))
                .with(O::icmpv6_type(2))
                .with(O::icmpv6_code(0)),
            patch(),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,icmp6,in_port=1,ipv6_dst=2001:db8::10,icmp_type=2,icmp_code=0 cookie:0xabcd000000000001 actions=output:2",
    );
    // underlay profile
    fm(
        FlowMod::add(
            0,
            100,
            COOKIE,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_dst(vip))
                .with(O::tcp_dst(80)),
            apply(vec![
                Action::SetField(O::eth_dst([2, 0, 0, 0, 0, 0x99])),
                Action::output(PATCH),
            ]),
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=100,tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80 cookie:0xabcd000000000001 actions=set_field:02:00:00:00:00:99->eth_dst,output:2",
    );
}

#[test]
fn flow_mod_commands_and_header_fields() {
    use OxmField as O;
    let m = || {
        Match::new()
            .with(O::in_port(PHYS))
            .with(O::eth_type(eth_type::IPV4))
            .with(O::ip_proto(ip_proto::UDP))
            .with(O::ipv4_dst(v4("192.0.2.10")))
            .with(O::udp_dst(53))
    };
    fm(
        FlowMod {
            idle_timeout: 30,
            hard_timeout: 300,
            flags: flow_mod_flags::SEND_FLOW_REM
                | flow_mod_flags::CHECK_OVERLAP
                | flow_mod_flags::RESET_COUNTS
                | flow_mod_flags::NO_PKT_COUNTS
                | flow_mod_flags::NO_BYT_COUNTS,
            ..FlowMod::add(3, 7, COOKIE, m(), apply(vec![Action::output(PATCH)]))
        },
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD table:3 priority=7,udp,in_port=1,nw_dst=192.0.2.10,tp_dst=53 cookie:0xabcd000000000001 idle:30 hard:300 send_flow_rem check_overlap reset_counts no_packet_counts no_byte_counts actions=output:2",
    );
    fm(
        FlowMod {
            command: FlowModCommand::Modify,
            cookie_mask: 0xffff_0000_0000_0000,
            ..FlowMod::add(0, 100, COOKIE, m(), apply(vec![Action::output(PHYS)]))
        },
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): MOD priority=100,udp,in_port=1,nw_dst=192.0.2.10,tp_dst=53 cookie:0xabcd000000000001/0xffff000000000000 actions=output:1",
    );
    fm(
        FlowMod {
            command: FlowModCommand::ModifyStrict,
            cookie_mask: u64::MAX,
            ..FlowMod::add(0, 100, COOKIE, m(), apply(vec![Action::output(PHYS)]))
        },
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): MOD_STRICT priority=100,udp,in_port=1,nw_dst=192.0.2.10,tp_dst=53 cookie:0xabcd000000000001/0xffffffffffffffff actions=output:1",
    );
    fm(
        FlowMod::delete_by_cookie(0xabcd_0000_0000_0000, 0xffff_0000_0000_0000),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): DEL table:255 cookie:0xabcd000000000000/0xffff000000000000 actions=drop",
    );
    fm(
        FlowMod::delete_strict(0, 100, m(), COOKIE, u64::MAX),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): DEL_STRICT priority=100,udp,in_port=1,nw_dst=192.0.2.10,tp_dst=53 cookie:0xabcd000000000001/0xffffffffffffffff actions=drop",
    );
    // ofp-print shows out_port but not out_group; check its bytes (offset 40).
    let del = FlowMod {
        out_port: PATCH,
        out_group: 7,
        ..FlowMod::delete_by_cookie(0, 0)
    };
    let bytes = Message::FlowMod(del).encode(1);
    assert_eq!(&bytes[36..44], &[0, 0, 0, 2, 0, 0, 0, 7]);
    fm(
        FlowMod {
            out_port: PATCH,
            out_group: 7,
            ..FlowMod::delete_by_cookie(0xabcd_0000_0000_0000, 0xffff_0000_0000_0000)
        },
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): DEL table:255 cookie:0xabcd000000000000/0xffff000000000000 out_port:2 actions=drop",
    );
}

#[test]
fn flow_mod_every_match_field() {
    use OxmField as O;
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    // Ethernet, VLAN, IPv4 with masks, TCP.
    fm(
        FlowMod::add(
            0,
            1,
            0,
            Match::new()
                .with(O::in_port(PHYS))
                .with(O::eth_src(mac))
                .with(O::eth_dst([0xff; 6]))
                .with(O::vlan_vid(4094))
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::TCP))
                .with(O::ipv4_src_masked(v4("10.0.0.0"), v4("255.0.0.0")))
                .with(O::ipv4_dst_masked(v4("192.0.2.0"), v4("255.255.0.255")))
                .with(O::tcp_src(1024))
                .with(O::tcp_dst(443)),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=1,tcp,in_port=1,dl_vlan=4094,dl_src=02:11:22:33:44:55,dl_dst=ff:ff:ff:ff:ff:ff,nw_src=10.0.0.0/8,nw_dst=192.0.0.0/255.255.0.255,tp_src=1024,tp_dst=443 actions=drop",
    );
    // IPv6 with masks, UDP; registers and metadata.
    fm(
        FlowMod::add(
            0,
            2,
            0,
            Match::new()
                .with(O::reg(0, 1))
                .with(O::metadata(0x10, Some(0xff)))
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::UDP))
                .with(O::ipv6_src_masked(v6("2001:db8::"), v6("ffff:ffff::")))
                .with(O::ipv6_dst(v6("2001:db8::10")))
                .with(O::udp_src(53))
                .with(O::udp_dst(5353)),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=2,udp6,reg0=0x1,metadata=0x10/0xff,ipv6_src=2001:db8::/32,ipv6_dst=2001:db8::10,tp_src=53,tp_dst=5353 actions=drop",
    );
    // SCTP over IPv6.
    fm(
        FlowMod::add(
            0,
            3,
            0,
            Match::new()
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::SCTP))
                .with(O::sctp_src(1))
                .with(O::sctp_dst(3868)),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=3,sctp6,tp_src=1,tp_dst=3868 actions=drop",
    );
    // ARP, every field.
    fm(
        FlowMod::add(
            0,
            4,
            0,
            Match::new()
                .with(O::eth_type(eth_type::ARP))
                .with(O::arp_op(2))
                .with(O::arp_spa_masked(v4("10.0.0.0"), v4("255.255.255.0")))
                .with(O::arp_tpa(v4("10.0.0.1")))
                .with(O::arp_sha(mac))
                .with(O::arp_tha([0; 6])),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=4,arp,arp_spa=10.0.0.0/24,arp_tpa=10.0.0.1,arp_op=2,arp_sha=02:11:22:33:44:55,arp_tha=00:00:00:00:00:00 actions=drop",
    );
    // ICMPv4 and ICMPv6/ND.
    fm(
        FlowMod::add(
            0,
            5,
            0,
            Match::new()
                .with(O::eth_type(eth_type::IPV4))
                .with(O::ip_proto(ip_proto::ICMP))
                .with(O::icmpv4_type(8))
                .with(O::icmpv4_code(0)),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=5,icmp,icmp_type=8,icmp_code=0 actions=drop",
    );
    fm(
        FlowMod::add(
            0,
            6,
            0,
            Match::new()
                .with(O::eth_type(eth_type::IPV6))
                .with(O::ip_proto(ip_proto::ICMPV6))
                .with(O::icmpv6_type(136))
                .with(O::icmpv6_code(0))
                .with(O::ipv6_nd_target(v6("fe80::1"))),
            vec![],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=6,icmp6,icmp_type=136,icmp_code=0,nd_target=fe80::1 actions=drop",
    );
}

#[test]
fn flow_mod_every_instruction_and_action() {
    use OxmField as O;
    let m = || {
        Match::new()
            .with(O::eth_type(eth_type::IPV4))
            .with(O::ipv4_dst(v4("192.0.2.10")))
    };
    fm(
        FlowMod::add(
            0,
            10,
            0,
            m(),
            vec![
                Instruction::ApplyActions(vec![
                    Action::PushVlan(eth_type::VLAN),
                    Action::SetField(O::vlan_vid(10)),
                    Action::PopVlan,
                    Action::SetField(O::eth_src([2, 0, 0, 0, 0, 1])),
                    Action::SetField(O::ipv4_dst(v4("10.0.0.5"))),
                    Action::SetField(O::reg(2, 0x1234)),
                    reg_move(0, 1, 16),
                    reg_move(0, 1, 32),
                    Action::Group(1),
                    Action::output(port::IN_PORT),
                    Action::output(port::CONTROLLER),
                    Action::output(port::NORMAL),
                    Action::output(port::LOCAL),
                    Action::output(PATCH),
                ]),
                Instruction::ClearActions,
                Instruction::WriteActions(vec![Action::output(PHYS)]),
                Instruction::WriteMetadata {
                    metadata: 0x5,
                    mask: 0xff,
                },
                Instruction::GotoTable(3),
            ],
        ),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=10,ip,nw_dst=192.0.2.10 actions=push_vlan:0x8100,set_field:4106->vlan_vid,pop_vlan,set_field:02:00:00:00:00:01->eth_src,set_field:10.0.0.5->ip_dst,set_field:0x1234->reg2,move:NXM_NX_REG0[0..15]->NXM_NX_REG1[0..15],move:NXM_NX_REG0[]->NXM_NX_REG1[],group:1,IN_PORT,CONTROLLER:65535,NORMAL,LOCAL,output:2,clear_actions,write_actions(output:1),write_metadata:0x5/0xff,goto_table:3",
    );
    // Drop: no instructions at all.
    fm(
        FlowMod::add(0, 11, 0, m(), vec![]),
        "OFPT_FLOW_MOD (OF1.3) (xid=0x10): ADD priority=11,ip,nw_dst=192.0.2.10 actions=drop",
    );
}

// ---- asynchronous messages ------------------------------------------------------------------

/// An ARP request from 10.0.0.1 for 192.0.2.10 (60 bytes, padded as on the wire).
fn arp_request() -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&[0xff; 6]);
    p.extend_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    p.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    p.extend_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 10, 0, 0, 1]);
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 192, 0, 2, 10]);
    p.resize(60, 0);
    p
}

#[test]
fn packet_in_and_out() {
    let data = arp_request();
    golden(
        Message::PacketIn(PacketIn {
            buffer_id: 0xffff_ffff,
            total_len: data.len() as u16,
            reason: 1,
            table_id: 0,
            cookie: COOKIE,
            match_: Match::new().with(OxmField::in_port(PHYS)),
            data: data.clone(),
        }),
        0,
        concat!(
            "OFPT_PACKET_IN (OF1.3) (xid=0x0): cookie=0xabcd000000000001 total_len=60 in_port=1 (via action) data_len=60 (unbuffered)\n",
            "arp,vlan_tci=0x0000,dl_src=02:11:22:33:44:55,dl_dst=ff:ff:ff:ff:ff:ff,arp_spa=10.0.0.1,arp_tpa=192.0.2.10,arp_op=1,arp_sha=02:11:22:33:44:55,arp_tha=00:00:00:00:00:00",
        ),
    );
    golden(
        Message::PacketOut(PacketOut {
            buffer_id: 0xffff_ffff,
            in_port: port::CONTROLLER,
            actions: vec![Action::output(PHYS)],
            data,
        }),
        0x20,
        concat!(
            "OFPT_PACKET_OUT (OF1.3) (xid=0x20): in_port=CONTROLLER actions=output:1 data_len=60\n",
            "arp,vlan_tci=0x0000,dl_src=02:11:22:33:44:55,dl_dst=ff:ff:ff:ff:ff:ff,arp_spa=10.0.0.1,arp_tpa=192.0.2.10,arp_op=1,arp_sha=02:11:22:33:44:55,arp_tha=00:00:00:00:00:00",
        ),
    );
}

fn eth0() -> Port {
    Port {
        port_no: PHYS,
        hw_addr: [0xaa, 0x55, 0xaa, 0x55, 0x00, 0x01],
        name: "eth0".into(),
        config: 0,
        state: port_state::LIVE,
        curr: 0x820,
        advertised: 0,
        supported: 0,
        peer: 0,
        curr_speed: 10_000_000,
        max_speed: 0,
    }
}

#[test]
fn port_status() {
    golden(
        Message::PortStatus(PortStatus {
            reason: PortReason::Add,
            port: eth0(),
        }),
        0,
        concat!(
            "OFPT_PORT_STATUS (OF1.3) (xid=0x0): ADD: 1(eth0): addr:aa:55:aa:55:00:01\n",
            "     config:     0\n",
            "     state:      LIVE\n",
            "     current:    1GB-FD COPPER\n",
            "     speed: 10000 Mbps now, 0 Mbps max",
        ),
    );
    golden(
        Message::PortStatus(PortStatus {
            reason: PortReason::Delete,
            port: Port {
                state: port_state::LINK_DOWN,
                ..eth0()
            },
        }),
        0,
        concat!(
            "OFPT_PORT_STATUS (OF1.3) (xid=0x0): DEL: 1(eth0): addr:aa:55:aa:55:00:01\n",
            "     config:     0\n",
            "     state:      LINK_DOWN\n",
            "     current:    1GB-FD COPPER\n",
            "     speed: 10000 Mbps now, 0 Mbps max",
        ),
    );
}

// ---- multipart ----------------------------------------------------------------------------

#[test]
fn multipart_requests() {
    let req = |b| Message::MultipartRequest(MultipartRequest::new(b));
    golden(
        req(MultipartRequestBody::Desc),
        0x30,
        "OFPST_DESC request (OF1.3) (xid=0x30):",
    );
    let flow_req = req(MultipartRequestBody::Flow(FlowStatsRequest::by_cookie(
        0xabcd_0000_0000_0000,
        0xffff_0000_0000_0000,
    )));
    // ofp-print does not show a stats request's cookie, so pin the bytes: all tables, any
    // port and group, cookie/mask, empty OXM match.
    assert_eq!(
        hex(&flow_req.encode(0x31)),
        concat!(
            "04120038000000310001000000000000",
            "ff000000ffffffffffffffff00000000",
            "abcd000000000000ffff000000000000",
            "0001000400000000"
        )
    );
    golden(flow_req, 0x31, "OFPST_FLOW request (OF1.3) (xid=0x31):");
    golden(
        req(MultipartRequestBody::Aggregate(FlowStatsRequest {
            table_id: 0,
            match_: Match::new().with(OxmField::in_port(PHYS)),
            ..FlowStatsRequest::by_cookie(0xabcd_0000_0000_0000, 0xffff_0000_0000_0000)
        })),
        0x32,
        "OFPST_AGGREGATE request (OF1.3) (xid=0x32): table=0 in_port=1",
    );
    golden(
        req(MultipartRequestBody::PortDesc),
        0x33,
        "OFPST_PORT_DESC request (OF1.3) (xid=0x33): port=ANY",
    );
}

#[test]
fn multipart_replies() {
    let rep = |flags, body| Message::MultipartReply(MultipartReply { flags, body });
    golden(
        rep(
            0,
            MultipartReplyBody::Desc(Desc {
                mfr_desc: "Nicira, Inc.".into(),
                hw_desc: "Open vSwitch".into(),
                sw_desc: "3.1.0".into(),
                serial_num: "None".into(),
                dp_desc: "br-ex".into(),
            }),
        ),
        0x30,
        concat!(
            "OFPST_DESC reply (OF1.3) (xid=0x30):\n",
            "Manufacturer: Nicira, Inc.\n",
            "Hardware: Open vSwitch\n",
            "Software: 3.1.0\n",
            "Serial Num: None\n",
            "DP Description: br-ex",
        ),
    );
    let flow = FlowStats {
        table_id: 0,
        duration_sec: 12,
        duration_nsec: 345_000_000,
        priority: 200,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: COOKIE,
        packet_count: 3,
        byte_count: 180,
        match_: Match::new()
            .with(OxmField::in_port(PHYS))
            .with(OxmField::eth_type(eth_type::ARP))
            .with(OxmField::arp_op(1))
            .with(OxmField::arp_tpa(v4("192.0.2.10"))),
        instructions: apply(vec![Action::output(port::LOCAL)]),
    };
    let flow2 = FlowStats {
        table_id: 1,
        priority: 0x8000,
        cookie: 0,
        idle_timeout: 10,
        match_: Match::new(),
        instructions: vec![],
        ..flow.clone()
    };
    golden(
        rep(
            openflow::multipart::MPF_MORE,
            MultipartReplyBody::Flow(vec![flow.clone()]),
        ),
        0x31,
        concat!(
            "OFPST_FLOW reply (OF1.3) (xid=0x31): flags=[more]\n",
            " cookie=0xabcd000000000001, duration=12.345s, table=0, n_packets=3, n_bytes=180, priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1 actions=LOCAL",
        ),
    );
    // Our dump-flows rendering of these flows is what ofp-print shows for them.
    let two = rep(
        0,
        MultipartReplyBody::Flow(vec![flow.clone(), flow2.clone()]),
    );
    let printed = ofp_print(&two.encode(0x31));
    let lines: Vec<&str> = printed.lines().filter(|l| l.starts_with(' ')).collect();
    assert_eq!(
        lines,
        [
            flow.dump_line(true).to_string(),
            flow2.dump_line(true).to_string()
        ]
    );
    golden(
        rep(0, MultipartReplyBody::Flow(vec![flow, flow2])),
        0x31,
        concat!(
            "OFPST_FLOW reply (OF1.3) (xid=0x31):\n",
            " cookie=0xabcd000000000001, duration=12.345s, table=0, n_packets=3, n_bytes=180, priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1 actions=LOCAL\n",
            " cookie=0x0, duration=12.345s, table=1, n_packets=3, n_bytes=180, idle_timeout=10, actions=drop",
        ),
    );
    golden(
        rep(0, MultipartReplyBody::Flow(vec![])),
        0x31,
        "OFPST_FLOW reply (OF1.3) (xid=0x31):",
    );
    golden(
        rep(
            0,
            MultipartReplyBody::Aggregate(AggregateStats {
                packet_count: 10,
                byte_count: 600,
                flow_count: 2,
            }),
        ),
        0x32,
        "OFPST_AGGREGATE reply (OF1.3) (xid=0x32): packet_count=10 byte_count=600 flow_count=2",
    );
    golden(
        rep(
            0,
            MultipartReplyBody::PortDesc(vec![
                eth0(),
                Port {
                    port_no: port::LOCAL,
                    name: "br-ex".into(),
                    hw_addr: [2, 0, 0, 0, 0, 1],
                    ..eth0()
                },
            ]),
        ),
        0x33,
        concat!(
            "OFPST_PORT_DESC reply (OF1.3) (xid=0x33):\n",
            " 1(eth0): addr:aa:55:aa:55:00:01\n",
            "     config:     0\n",
            "     state:      LIVE\n",
            "     current:    1GB-FD COPPER\n",
            "     speed: 10000 Mbps now, 0 Mbps max\n",
            " LOCAL(br-ex): addr:02:00:00:00:00:01\n",
            "     config:     0\n",
            "     state:      LIVE\n",
            "     current:    1GB-FD COPPER\n",
            "     speed: 10000 Mbps now, 0 Mbps max",
        ),
    );
    assert_eq!(mp_type::PORT_DESC, 13);
}

// ---- bundles ------------------------------------------------------------------------------

#[test]
fn bundles() {
    let flags = bundle_flags::ATOMIC | bundle_flags::ORDERED;
    let ctrl = |t| Message::BundleControl(BundleCtrl::new(1, t, flags));
    golden(
        ctrl(BundleCtrlType::OpenRequest),
        0x40,
        concat!(
            "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x40):\n",
            " bundle_id=0x1 type=OPEN_REQUEST flags=atomic ordered",
        ),
    );
    let add = FlowMod::add(
        0,
        200,
        COOKIE,
        Match::new()
            .with(OxmField::in_port(PHYS))
            .with(OxmField::eth_type(eth_type::ARP))
            .with(OxmField::arp_op(1))
            .with(OxmField::arp_tpa(v4("192.0.2.10"))),
        apply(vec![Action::output(port::LOCAL)]),
    );
    golden(
        Message::BundleAdd(BundleAdd::new(1, flags, Message::FlowMod(add))),
        0x41,
        concat!(
            "ONFT_BUNDLE_ADD_MESSAGE (OF1.3) (xid=0x41):\n",
            " bundle_id=0x1 flags=atomic ordered\n",
            "OFPT_FLOW_MOD (OF1.3) (xid=0x41): ADD priority=200,arp,in_port=1,arp_tpa=192.0.2.10,arp_op=1 cookie:0xabcd000000000001 actions=LOCAL",
        ),
    );
    golden(
        Message::BundleAdd(BundleAdd::new(
            1,
            flags,
            Message::FlowMod(FlowMod::delete_by_cookie(
                0xabcd_0000_0000_0000,
                0xffff_0000_0000_0000,
            )),
        )),
        0x42,
        concat!(
            "ONFT_BUNDLE_ADD_MESSAGE (OF1.3) (xid=0x42):\n",
            " bundle_id=0x1 flags=atomic ordered\n",
            "OFPT_FLOW_MOD (OF1.3) (xid=0x42): DEL table:255 cookie:0xabcd000000000000/0xffff000000000000 actions=drop",
        ),
    );
    golden(
        ctrl(BundleCtrlType::CloseRequest),
        0x43,
        concat!(
            "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x43):\n",
            " bundle_id=0x1 type=CLOSE_REQUEST flags=atomic ordered",
        ),
    );
    golden(
        ctrl(BundleCtrlType::CommitRequest),
        0x44,
        concat!(
            "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x44):\n",
            " bundle_id=0x1 type=COMMIT_REQUEST flags=atomic ordered",
        ),
    );
    golden(
        ctrl(BundleCtrlType::CommitReply),
        0x44,
        concat!(
            "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x44):\n",
            " bundle_id=0x1 type=COMMIT_REPLY flags=atomic ordered",
        ),
    );
    golden(
        ctrl(BundleCtrlType::DiscardRequest),
        0x45,
        concat!(
            "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x45):\n",
            " bundle_id=0x1 type=DISCARD_REQUEST flags=atomic ordered",
        ),
    );
}
