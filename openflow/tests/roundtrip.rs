//! Property tests of the wire layer: emit then decode gives back the original, for every
//! structure (known and raw/unknown forms alike), and decoding arbitrary or mutated bytes
//! returns an error instead of panicking.

use openflow::action::{Action, NX_VENDOR_ID, decode_actions, emit_actions};
use openflow::bundle::BundleAdd;
use openflow::flow_mod::FlowModCommand;
use openflow::instruction::Instruction;
use openflow::multipart::{AggregateStats, Desc, FlowStatsRequest, MultipartRequestBody};
use openflow::oxm::{
    NX_IP_FRAG, OXM_CLASS_EXPERIMENTER, OXM_CLASS_NXM1, OXM_CLASS_OPENFLOW_BASIC, OxmField,
    field_info,
};
use openflow::port::Port;
use openflow::{
    FlowMod, FlowStats, Match, Message, MultipartReply, MultipartReplyBody, MultipartRequest,
};
use proptest::collection::vec;

#[path = "../fuzz/src/lib.rs"]
mod fuzz_check;
use proptest::prelude::*;

fn bytes(n: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), n)
}

/// A field the decoder knows (OpenFlow basic class, Nicira registers and fragment bits): right width, a mask
/// only where the field is maskable.
fn known_field() -> impl Strategy<Value = OxmField> {
    let known: Vec<(u16, u8)> = (0u8..=39)
        .map(|f| (OXM_CLASS_OPENFLOW_BASIC, f))
        .chain((0u8..16).map(|f| (OXM_CLASS_NXM1, f)))
        .chain([(OXM_CLASS_NXM1, NX_IP_FRAG)])
        .filter(|&(c, f)| field_info(c, f).is_some())
        .collect();
    proptest::sample::select(known).prop_flat_map(|(class, field)| {
        let fi = field_info(class, field).unwrap();
        let mask = if fi.maskable {
            proptest::option::of(bytes(fi.len)).boxed()
        } else {
            Just(None).boxed()
        };
        (bytes(fi.len), mask).prop_map(move |(value, mask)| OxmField {
            class,
            field,
            value,
            mask,
        })
    })
}

/// A field the decoder does not know: other classes, unassigned basic fields, experimenter
/// fields (whose value starts with the 4-byte experimenter id), with or without a mask.
fn raw_field() -> impl Strategy<Value = OxmField> {
    let class_field = prop_oneof![
        (Just(0x0000u16), 0u8..128),
        (
            Just(OXM_CLASS_NXM1),
            (16u8..128).prop_filter("nw_frag is a known field", |f| *f != NX_IP_FRAG)
        ),
        (Just(OXM_CLASS_OPENFLOW_BASIC), 40u8..128),
        (0x0002u16..0x8000, 0u8..128),
        (0x8001u16..0xffff, 0u8..128),
    ];
    let plain = (class_field, 0usize..32, any::<bool>()).prop_flat_map(|((class, field), n, m)| {
        let mask = if m {
            bytes(n).prop_map(Some).boxed()
        } else {
            Just(None).boxed()
        };
        (bytes(n), mask).prop_map(move |(value, mask)| OxmField {
            class,
            field,
            value,
            mask,
        })
    });
    let experimenter =
        (0u8..128, bytes(4), 0usize..24, any::<bool>()).prop_flat_map(|(field, id, n, m)| {
            let mask = if m {
                bytes(n).prop_map(Some).boxed()
            } else {
                Just(None).boxed()
            };
            (bytes(n), mask).prop_map(move |(body, mask)| {
                let mut value = id.clone();
                value.extend(body);
                OxmField {
                    class: OXM_CLASS_EXPERIMENTER,
                    field,
                    value,
                    mask,
                }
            })
        });
    prop_oneof![plain, experimenter]
}

fn oxm_field() -> impl Strategy<Value = OxmField> {
    prop_oneof![3 => known_field(), 1 => raw_field()]
}

fn a_match() -> impl Strategy<Value = Match> {
    vec(oxm_field(), 0..8).prop_map(|fields| Match { fields })
}

fn action() -> impl Strategy<Value = Action> {
    // Action types the decoder interprets; anything else comes back as Unknown.
    const KNOWN: [u16; 17] = [
        0, 11, 12, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 0xffff,
    ];
    let set_field = prop_oneof![known_field(), raw_field()]
        .prop_map(|f| OxmField { mask: None, ..f })
        .prop_map(Action::SetField);
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| Action::Output { port, max_len }),
        Just(Action::CopyTtlOut),
        Just(Action::CopyTtlIn),
        any::<u8>().prop_map(Action::SetMplsTtl),
        Just(Action::DecMplsTtl),
        any::<u16>().prop_map(Action::PushVlan),
        Just(Action::PopVlan),
        any::<u16>().prop_map(Action::PushMpls),
        any::<u16>().prop_map(Action::PopMpls),
        any::<u32>().prop_map(Action::SetQueue),
        any::<u32>().prop_map(Action::Group),
        any::<u8>().prop_map(Action::SetNwTtl),
        Just(Action::DecNwTtl),
        set_field,
        any::<u16>().prop_map(Action::PushPbb),
        Just(Action::PopPbb),
        (
            any::<u16>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(n_bits, src_ofs, dst_ofs, src, dst)| Action::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            }),
        (any::<u16>(), any::<u8>())
            .prop_map(|(in_port, table)| Action::Resubmit { in_port, table }),
        // Not Nicira, so it cannot be read back as a reg move; 8-byte aligned total length.
        (
            any::<u32>().prop_filter("not nicira", |e| *e != NX_VENDOR_ID),
            (0usize..4).prop_flat_map(|n| bytes(8 * n))
        )
            .prop_map(|(experimenter, data)| Action::Experimenter { experimenter, data }),
        (
            any::<u16>().prop_filter("unknown type", |t| !KNOWN.contains(t)),
            (0usize..4).prop_flat_map(|n| bytes(8 * n + 4))
        )
            .prop_map(|(action_type, data)| Action::Unknown { action_type, data }),
    ]
}

fn instruction() -> impl Strategy<Value = Instruction> {
    prop_oneof![
        any::<u8>().prop_map(Instruction::GotoTable),
        (any::<u64>(), any::<u64>())
            .prop_map(|(metadata, mask)| Instruction::WriteMetadata { metadata, mask }),
        vec(action(), 0..4).prop_map(Instruction::WriteActions),
        vec(action(), 0..4).prop_map(Instruction::ApplyActions),
        Just(Instruction::ClearActions),
        any::<u32>().prop_map(Instruction::Meter),
        (
            prop_oneof![7u16..0xffff, Just(0u16), Just(0xffffu16)],
            (0usize..3).prop_flat_map(|n| bytes(8 * n + 4))
        )
            .prop_map(|(instruction_type, data)| Instruction::Unknown {
                instruction_type,
                data
            }),
    ]
}

fn command() -> impl Strategy<Value = FlowModCommand> {
    (0u8..5).prop_map(|c| FlowModCommand::from_u8(c).unwrap())
}

fn flow_mod() -> impl Strategy<Value = FlowMod> {
    (
        (any::<u64>(), any::<u64>(), any::<u8>(), command()),
        (any::<u16>(), any::<u16>(), any::<u16>(), any::<u32>()),
        (any::<u32>(), any::<u32>(), any::<u16>()),
        a_match(),
        vec(instruction(), 0..4),
    )
        .prop_map(
            |(
                (cookie, cookie_mask, table_id, command),
                (idle_timeout, hard_timeout, priority, buffer_id),
                (out_port, out_group, flags),
                match_,
                instructions,
            )| FlowMod {
                cookie,
                cookie_mask,
                table_id,
                command,
                idle_timeout,
                hard_timeout,
                priority,
                buffer_id,
                out_port,
                out_group,
                flags,
                match_,
                instructions,
            },
        )
}

fn flow_stats() -> impl Strategy<Value = FlowStats> {
    (
        (any::<u8>(), any::<u32>(), any::<u32>(), any::<u16>()),
        (any::<u16>(), any::<u16>(), any::<u16>()),
        (any::<u64>(), any::<u64>(), any::<u64>()),
        a_match(),
        vec(instruction(), 0..3),
    )
        .prop_map(
            |(
                (table_id, duration_sec, duration_nsec, priority),
                (idle_timeout, hard_timeout, flags),
                (cookie, packet_count, byte_count),
                match_,
                instructions,
            )| FlowStats {
                table_id,
                duration_sec,
                duration_nsec,
                priority,
                idle_timeout,
                hard_timeout,
                flags,
                cookie,
                packet_count,
                byte_count,
                match_,
                instructions,
            },
        )
}

/// NUL-free text that fits a fixed-width C string field.
fn c_str(max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[ -~]{{0,{max}}}")).unwrap()
}

fn port() -> impl Strategy<Value = Port> {
    (
        (any::<u32>(), any::<[u8; 6]>(), c_str(15)),
        vec(any::<u32>(), 8),
    )
        .prop_map(|((port_no, hw_addr, name), v)| Port {
            port_no,
            hw_addr,
            name,
            config: v[0],
            state: v[1],
            curr: v[2],
            advertised: v[3],
            supported: v[4],
            peer: v[5],
            curr_speed: v[6],
            max_speed: v[7],
        })
}

fn multipart_reply() -> impl Strategy<Value = MultipartReply> {
    let body = prop_oneof![
        (c_str(255), c_str(255), c_str(255), c_str(31), c_str(255)).prop_map(
            |(mfr_desc, hw_desc, sw_desc, serial_num, dp_desc)| MultipartReplyBody::Desc(Desc {
                mfr_desc,
                hw_desc,
                sw_desc,
                serial_num,
                dp_desc,
            })
        ),
        vec(flow_stats(), 0..4).prop_map(MultipartReplyBody::Flow),
        (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(p, b, f)| {
            MultipartReplyBody::Aggregate(AggregateStats {
                packet_count: p,
                byte_count: b,
                flow_count: f,
            })
        }),
        vec(port(), 0..4).prop_map(MultipartReplyBody::PortDesc),
        (
            any::<u16>().prop_filter("raw type", |t| ![0, 1, 2, 13].contains(t)),
            vec(any::<u8>(), 0..64)
        )
            .prop_map(|(mp_type, body)| MultipartReplyBody::Other { mp_type, body }),
    ];
    (any::<u16>(), body).prop_map(|(flags, body)| MultipartReply { flags, body })
}

fn flow_stats_request() -> impl Strategy<Value = FlowStatsRequest> {
    (
        any::<u8>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        a_match(),
    )
        .prop_map(
            |(table_id, out_port, out_group, cookie, cookie_mask, match_)| FlowStatsRequest {
                table_id,
                out_port,
                out_group,
                cookie,
                cookie_mask,
                match_,
            },
        )
}

fn multipart_request() -> impl Strategy<Value = MultipartRequest> {
    let body = prop_oneof![
        Just(MultipartRequestBody::Desc),
        Just(MultipartRequestBody::PortDesc),
        flow_stats_request().prop_map(MultipartRequestBody::Flow),
        flow_stats_request().prop_map(MultipartRequestBody::Aggregate),
    ];
    (any::<u16>(), body).prop_map(|(flags, body)| MultipartRequest { flags, body })
}

fn bundle_add() -> impl Strategy<Value = BundleAdd> {
    let inner = prop_oneof![
        flow_mod().prop_map(Message::FlowMod),
        Just(Message::BarrierRequest),
        vec(any::<u8>(), 0..16).prop_map(Message::EchoRequest),
    ];
    (any::<u32>(), any::<u16>(), inner).prop_map(|(id, flags, m)| BundleAdd::new(id, flags, m))
}

/// A valid message of some type, for mutation.
fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        flow_mod().prop_map(Message::FlowMod),
        multipart_reply().prop_map(Message::MultipartReply),
        multipart_request().prop_map(Message::MultipartRequest),
        bundle_add().prop_map(Message::BundleAdd),
        vec(any::<u8>(), 0..16).prop_map(Message::EchoReply),
    ]
}

fn roundtrip(m: &Message) {
    let bytes = m.encode(0x1234_5678);
    let (h, back) = Message::decode(&bytes).unwrap();
    assert_eq!(h.length as usize, bytes.len());
    assert_eq!(h.xid, 0x1234_5678);
    assert_eq!(&back, m);
    // Encoding the decoded value gives the same bytes.
    assert_eq!(back.encode(0x1234_5678), bytes);
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
    /// Rewrite the header length to the buffer's current length.
    FixLength,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        2 => any::<usize>().prop_map(Mutation::Truncate),
        1 => vec(any::<u8>(), 1..24).prop_map(Mutation::Extend),
        2 => Just(Mutation::FixLength),
    ]
}

fn mutate(mut b: Vec<u8>, ops: &[Mutation]) -> Vec<u8> {
    for op in ops {
        match op {
            Mutation::Flip(i, x) if !b.is_empty() => {
                let i = i % b.len();
                b[i] ^= x;
            }
            Mutation::Truncate(n) if !b.is_empty() => b.truncate(n % b.len()),
            Mutation::Extend(e) => b.extend_from_slice(e),
            Mutation::FixLength if b.len() >= 4 => {
                let l = u16::try_from(b.len()).unwrap_or(u16::MAX).to_be_bytes();
                b[2] = l[0];
                b[3] = l[1];
            }
            _ => {}
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn oxm_field_roundtrips(f in oxm_field()) {
        let m = Match { fields: vec![f] };
        let mut buf = Vec::new();
        m.emit(&mut buf);
        prop_assert_eq!(buf.len() % 8, 0);
        prop_assert_eq!(Match::decode(&buf).unwrap(), m);
    }

    #[test]
    fn match_roundtrips(m in a_match()) {
        let mut buf = Vec::new();
        m.emit(&mut buf);
        prop_assert_eq!(buf.len(), m.encoded_len());
        prop_assert_eq!(Match::decode(&buf).unwrap(), m);
    }

    #[test]
    fn normalized_is_idempotent(m in a_match()) {
        let n = m.normalized();
        prop_assert_eq!(n.normalized(), n);
    }

    #[test]
    fn actions_roundtrip(a in vec(action(), 0..6)) {
        let mut buf = Vec::new();
        emit_actions(&a, &mut buf);
        prop_assert_eq!(buf.len() % 8, 0);
        prop_assert_eq!(
            buf.len(),
            a.iter().map(Action::encoded_len).sum::<usize>()
        );
        prop_assert_eq!(decode_actions(&buf).unwrap(), a);
    }

    #[test]
    fn instructions_roundtrip_in_a_flow_mod(ins in vec(instruction(), 0..5)) {
        roundtrip(&Message::FlowMod(FlowMod { instructions: ins, ..FlowMod::default() }));
    }

    #[test]
    fn flow_mod_roundtrips(f in flow_mod()) {
        roundtrip(&Message::FlowMod(f));
    }

    #[test]
    fn multipart_reply_roundtrips(r in multipart_reply()) {
        roundtrip(&Message::MultipartReply(r));
    }

    #[test]
    fn multipart_request_roundtrips(r in multipart_request()) {
        roundtrip(&Message::MultipartRequest(r));
    }

    #[test]
    fn bundle_add_roundtrips(b in bundle_add()) {
        roundtrip(&Message::BundleAdd(b));
    }

    #[test]
    fn text_form_never_panics(f in flow_stats()) {
        let _ = f.dump_line(true).to_string();
        let _ = f.dump_line(false).to_string();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Arbitrary bytes: half the time with a 1.3 header whose length fits the buffer, so the
    /// body decoders are reached rather than only the header check.
    #[test]
    fn decode_arbitrary_bytes_never_panics(
        mut b in vec(any::<u8>(), 0..256),
        ty in 0u8..32,
        fix in any::<bool>(),
    ) {
        if fix && b.len() >= 8 {
            b[0] = 4;
            b[1] = ty;
            let l = (b.len() as u16).to_be_bytes();
            b[2] = l[0];
            b[3] = l[1];
        }
        fuzz_check::check_decode(&b);
    }

    #[test]
    fn decode_mutated_messages_never_panics(
        m in message(),
        ops in vec(mutation(), 1..4),
    ) {
        // The fuzz target's property: no panic, and whatever decodes re-encodes stably.
        fuzz_check::check_decode(&mutate(m.encode(1), &ops));
    }
}

/// Fixed-width strings from a peer may fill the field without a NUL and hold any bytes; what
/// we decode must still re-encode to a stable form.
#[test]
fn desc_strings_that_fill_the_field_reencode_stably() {
    let mut b = Message::MultipartReply(MultipartReply {
        flags: 0,
        body: MultipartReplyBody::Desc(Desc::default()),
    })
    .encode(1);
    // mfr_desc starts after the header (8) and the multipart header (8): 256 bytes of 'é'
    // (2 bytes each) with one stray continuation byte in front, no NUL.
    let field = &mut b[16..16 + 256];
    field[0] = 0x80;
    for pair in field[1..255].chunks_mut(2) {
        pair.copy_from_slice("é".as_bytes());
    }
    field[255] = b'x';
    fuzz_check::check_decode(&b);
}
