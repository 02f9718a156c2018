//! OXM match fields (`struct ofp_match` of type OFPMT_OXM) in a generic, lossless form.
//!
//! A field is kept as (class, field, value bytes, optional mask bytes). Fields that vipflow and
//! the OpenFlow 1.3 basic class define are length-checked on decode and have typed
//! constructors; any other field (another class, an experimenter field) is carried raw and
//! emitted back byte for byte. A generic form makes normalization (sorting, dropping all-ones
//! masks) and comparison with what the switch reports straightforward.

use crate::error::{DecodeError, Result};
use crate::wire::{Reader, len16, pad8, patch_u16, put_zeros};
use std::net::{Ipv4Addr, Ipv6Addr};

pub type MacAddr = [u8; 6];

pub const OXM_CLASS_NXM0: u16 = 0x0000;
pub const OXM_CLASS_NXM1: u16 = 0x0001;
pub const OXM_CLASS_OPENFLOW_BASIC: u16 = 0x8000;
pub const OXM_CLASS_EXPERIMENTER: u16 = 0xffff;
/// Ericsson's OXM class (Open vSwitch 2.11+): the two Neighbor Discovery fields that let a flow
/// turn a solicitation into an advertisement ([`ERIC_ND_RESERVED`], [`ERIC_ND_OPTIONS_TYPE`]).
pub const OXM_CLASS_ERICSSON: u16 = 0x1000;
/// `nd_reserved` (ERICOXM_OF_ICMPV6_ND_RESERVED): the 32 bits after the ICMPv6 checksum of an
/// NS/NA, where an advertisement's R, S and O flags are.
pub const ERIC_ND_RESERVED: u8 = 1;
/// `nd_options_type` (ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE): the type of the first ND option
/// (1 source, 2 target link-layer address).
pub const ERIC_ND_OPTIONS_TYPE: u8 = 2;

/// `ofp_match.type` for OXM matches.
pub const OFPMT_OXM: u16 = 1;

/// `OFPVID_PRESENT`: set in VLAN_VID when a tag is present.
pub const OFPVID_PRESENT: u16 = 0x1000;

/// Field numbers of the OpenFlow basic class (`enum oxm_ofb_match_fields`).
pub mod field {
    pub const IN_PORT: u8 = 0;
    pub const IN_PHY_PORT: u8 = 1;
    pub const METADATA: u8 = 2;
    pub const ETH_DST: u8 = 3;
    pub const ETH_SRC: u8 = 4;
    pub const ETH_TYPE: u8 = 5;
    pub const VLAN_VID: u8 = 6;
    pub const VLAN_PCP: u8 = 7;
    pub const IP_DSCP: u8 = 8;
    pub const IP_ECN: u8 = 9;
    pub const IP_PROTO: u8 = 10;
    pub const IPV4_SRC: u8 = 11;
    pub const IPV4_DST: u8 = 12;
    pub const TCP_SRC: u8 = 13;
    pub const TCP_DST: u8 = 14;
    pub const UDP_SRC: u8 = 15;
    pub const UDP_DST: u8 = 16;
    pub const SCTP_SRC: u8 = 17;
    pub const SCTP_DST: u8 = 18;
    pub const ICMPV4_TYPE: u8 = 19;
    pub const ICMPV4_CODE: u8 = 20;
    pub const ARP_OP: u8 = 21;
    pub const ARP_SPA: u8 = 22;
    pub const ARP_TPA: u8 = 23;
    pub const ARP_SHA: u8 = 24;
    pub const ARP_THA: u8 = 25;
    pub const IPV6_SRC: u8 = 26;
    pub const IPV6_DST: u8 = 27;
    pub const IPV6_FLABEL: u8 = 28;
    pub const ICMPV6_TYPE: u8 = 29;
    pub const ICMPV6_CODE: u8 = 30;
    pub const IPV6_ND_TARGET: u8 = 31;
    pub const IPV6_ND_SLL: u8 = 32;
    pub const IPV6_ND_TLL: u8 = 33;
    pub const MPLS_LABEL: u8 = 34;
    pub const MPLS_TC: u8 = 35;
    pub const MPLS_BOS: u8 = 36;
    pub const PBB_ISID: u8 = 37;
    pub const TUNNEL_ID: u8 = 38;
    pub const IPV6_EXTHDR: u8 = 39;
}

/// Ethertypes used by the prerequisites of vipflow's matches.
pub mod eth_type {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
}

/// IP protocol numbers.
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ICMPV6: u8 = 58;
    pub const SCTP: u8 = 132;
}

/// What we know about a field: its name (as ovs-ofctl's OXM names) and value width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    pub name: &'static str,
    pub len: usize,
    pub maskable: bool,
}

/// Known fields: the OpenFlow basic class and the Nicira registers (NXM_NX_REG0..15).
pub fn field_info(class: u16, field: u8) -> Option<FieldInfo> {
    use field::*;
    let fi = |name, len, maskable| {
        Some(FieldInfo {
            name,
            len,
            maskable,
        })
    };
    match class {
        OXM_CLASS_OPENFLOW_BASIC => match field {
            IN_PORT => fi("in_port", 4, false),
            IN_PHY_PORT => fi("in_phy_port", 4, false),
            METADATA => fi("metadata", 8, true),
            ETH_DST => fi("eth_dst", 6, true),
            ETH_SRC => fi("eth_src", 6, true),
            ETH_TYPE => fi("eth_type", 2, false),
            VLAN_VID => fi("vlan_vid", 2, true),
            VLAN_PCP => fi("vlan_pcp", 1, false),
            IP_DSCP => fi("ip_dscp", 1, false),
            IP_ECN => fi("ip_ecn", 1, false),
            IP_PROTO => fi("ip_proto", 1, false),
            IPV4_SRC => fi("ipv4_src", 4, true),
            IPV4_DST => fi("ipv4_dst", 4, true),
            TCP_SRC => fi("tcp_src", 2, true),
            TCP_DST => fi("tcp_dst", 2, true),
            UDP_SRC => fi("udp_src", 2, true),
            UDP_DST => fi("udp_dst", 2, true),
            SCTP_SRC => fi("sctp_src", 2, true),
            SCTP_DST => fi("sctp_dst", 2, true),
            ICMPV4_TYPE => fi("icmpv4_type", 1, false),
            ICMPV4_CODE => fi("icmpv4_code", 1, false),
            ARP_OP => fi("arp_op", 2, false),
            ARP_SPA => fi("arp_spa", 4, true),
            ARP_TPA => fi("arp_tpa", 4, true),
            ARP_SHA => fi("arp_sha", 6, true),
            ARP_THA => fi("arp_tha", 6, true),
            IPV6_SRC => fi("ipv6_src", 16, true),
            IPV6_DST => fi("ipv6_dst", 16, true),
            IPV6_FLABEL => fi("ipv6_flabel", 4, true),
            ICMPV6_TYPE => fi("icmpv6_type", 1, false),
            ICMPV6_CODE => fi("icmpv6_code", 1, false),
            IPV6_ND_TARGET => fi("nd_target", 16, true),
            IPV6_ND_SLL => fi("nd_sll", 6, true),
            IPV6_ND_TLL => fi("nd_tll", 6, true),
            MPLS_LABEL => fi("mpls_label", 4, false),
            MPLS_TC => fi("mpls_tc", 1, false),
            MPLS_BOS => fi("mpls_bos", 1, false),
            PBB_ISID => fi("pbb_isid", 3, true),
            TUNNEL_ID => fi("tunnel_id", 8, true),
            IPV6_EXTHDR => fi("ipv6_exthdr", 2, true),
            _ => None,
        },
        OXM_CLASS_NXM1 if field < 16 => fi(REG_NAMES[field as usize], 4, true),
        OXM_CLASS_NXM1 if field == NX_IP_FRAG => fi("nw_frag", 1, true),
        OXM_CLASS_ERICSSON if field == ERIC_ND_RESERVED => fi("nd_reserved", 4, false),
        OXM_CLASS_ERICSSON if field == ERIC_ND_OPTIONS_TYPE => fi("nd_options_type", 1, false),
        _ => None,
    }
}

/// NXM_NX_IP_FRAG (class 0x0001, field 26): bit 0 "is a fragment", bit 1 "not the first one".
/// OpenFlow 1.3 has no fragment field of its own; OVS accepts this one in OXM matches.
pub const NX_IP_FRAG: u8 = 26;
/// [`NX_IP_FRAG`] bits.
pub mod frag {
    /// Any fragment, first or later.
    pub const ANY: u8 = 0x01;
    /// A fragment with a non-zero offset.
    pub const LATER: u8 = 0x02;
}

const REG_NAMES: [&str; 16] = [
    "reg0", "reg1", "reg2", "reg3", "reg4", "reg5", "reg6", "reg7", "reg8", "reg9", "reg10",
    "reg11", "reg12", "reg13", "reg14", "reg15",
];

/// One OXM TLV. For the experimenter class the 4-byte experimenter id is the first 4 bytes of
/// `value` (it is part of the TLV payload on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OxmField {
    pub class: u16,
    pub field: u8,
    pub value: Vec<u8>,
    pub mask: Option<Vec<u8>>,
}

/// The 32-bit OXM header of a field without mask (class, field, length): the form Nicira
/// actions such as reg move use to name a field.
pub fn oxm_header(class: u16, field: u8, len: u8) -> u32 {
    (u32::from(class) << 16) | (u32::from(field) << 9) | u32::from(len)
}

/// The header Open vSwitch names a field by in the Nicira actions it reports back (reg move):
/// the NXM header where the field has one of the same length, else `header` unchanged. OVS
/// keeps fields, not headers, and encodes a reg move it reports with NXM headers, so a move
/// written with OXM headers reads back changed; written in this form it reads back as written.
pub fn canonical_header(header: u32) -> u32 {
    use field as f;
    const NXM_OF: u16 = 0x0000;
    const NXM_NX: u16 = 0x0001;
    if (header >> 16) as u16 != OXM_CLASS_OPENFLOW_BASIC || header & 0x100 != 0 {
        return header;
    }
    let (class, nxm) = match ((header >> 9) & 0x7f) as u8 {
        f::ETH_DST => (NXM_OF, 1),
        f::ETH_SRC => (NXM_OF, 2),
        f::ETH_TYPE => (NXM_OF, 3),
        f::IP_PROTO => (NXM_OF, 6),
        f::IPV4_SRC => (NXM_OF, 7),
        f::IPV4_DST => (NXM_OF, 8),
        f::TCP_SRC => (NXM_OF, 9),
        f::TCP_DST => (NXM_OF, 10),
        f::UDP_SRC => (NXM_OF, 11),
        f::UDP_DST => (NXM_OF, 12),
        f::ICMPV4_TYPE => (NXM_OF, 13),
        f::ICMPV4_CODE => (NXM_OF, 14),
        f::ARP_OP => (NXM_OF, 15),
        f::ARP_SPA => (NXM_OF, 16),
        f::ARP_TPA => (NXM_OF, 17),
        f::ARP_SHA => (NXM_NX, 17),
        f::ARP_THA => (NXM_NX, 18),
        f::IPV6_SRC => (NXM_NX, 19),
        f::IPV6_DST => (NXM_NX, 20),
        f::ICMPV6_TYPE => (NXM_NX, 21),
        f::ICMPV6_CODE => (NXM_NX, 22),
        f::IPV6_ND_TARGET => (NXM_NX, 23),
        f::IPV6_ND_SLL => (NXM_NX, 24),
        f::IPV6_ND_TLL => (NXM_NX, 25),
        _ => return header,
    };
    oxm_header(class, nxm, (header & 0xff) as u8)
}

impl OxmField {
    pub fn exact(class: u16, field: u8, value: Vec<u8>) -> Self {
        OxmField {
            class,
            field,
            value,
            mask: None,
        }
    }

    pub fn basic(field: u8, value: Vec<u8>) -> Self {
        Self::exact(OXM_CLASS_OPENFLOW_BASIC, field, value)
    }

    /// A masked field. The value is stored with the mask applied: OpenFlow requires value
    /// bits to be 0 where the mask is 0, and Open vSwitch rejects anything else with
    /// OFPBMC_BAD_WILDCARDS (e.g. `10.1.2.3/255.0.0.0` must go out as `10.0.0.0/255.0.0.0`).
    fn basic_masked(field: u8, mut value: Vec<u8>, mask: Vec<u8>) -> Self {
        for (v, m) in value.iter_mut().zip(&mask) {
            *v &= m;
        }
        OxmField {
            class: OXM_CLASS_OPENFLOW_BASIC,
            field,
            value,
            mask: Some(mask),
        }
    }

    pub fn in_port(port: u32) -> Self {
        Self::basic(field::IN_PORT, port.to_be_bytes().to_vec())
    }
    pub fn metadata(value: u64, mask: Option<u64>) -> Self {
        match mask {
            Some(m) => Self::basic_masked(
                field::METADATA,
                value.to_be_bytes().to_vec(),
                m.to_be_bytes().to_vec(),
            ),
            None => Self::basic(field::METADATA, value.to_be_bytes().to_vec()),
        }
    }
    pub fn eth_dst(mac: MacAddr) -> Self {
        Self::basic(field::ETH_DST, mac.to_vec())
    }
    pub fn eth_src(mac: MacAddr) -> Self {
        Self::basic(field::ETH_SRC, mac.to_vec())
    }
    pub fn eth_type(t: u16) -> Self {
        Self::basic(field::ETH_TYPE, t.to_be_bytes().to_vec())
    }
    /// A tagged VLAN `vid` (0..4095); OFPVID_PRESENT is added.
    pub fn vlan_vid(vid: u16) -> Self {
        Self::basic(
            field::VLAN_VID,
            ((vid & 0x0fff) | OFPVID_PRESENT).to_be_bytes().to_vec(),
        )
    }
    pub fn ip_proto(p: u8) -> Self {
        Self::basic(field::IP_PROTO, vec![p])
    }
    pub fn ipv4_src(ip: Ipv4Addr) -> Self {
        Self::basic(field::IPV4_SRC, ip.octets().to_vec())
    }
    pub fn ipv4_dst(ip: Ipv4Addr) -> Self {
        Self::basic(field::IPV4_DST, ip.octets().to_vec())
    }
    pub fn ipv4_src_masked(ip: Ipv4Addr, mask: Ipv4Addr) -> Self {
        Self::basic_masked(
            field::IPV4_SRC,
            ip.octets().to_vec(),
            mask.octets().to_vec(),
        )
    }
    pub fn ipv4_dst_masked(ip: Ipv4Addr, mask: Ipv4Addr) -> Self {
        Self::basic_masked(
            field::IPV4_DST,
            ip.octets().to_vec(),
            mask.octets().to_vec(),
        )
    }
    pub fn ipv6_src(ip: Ipv6Addr) -> Self {
        Self::basic(field::IPV6_SRC, ip.octets().to_vec())
    }
    pub fn ipv6_dst(ip: Ipv6Addr) -> Self {
        Self::basic(field::IPV6_DST, ip.octets().to_vec())
    }
    pub fn ipv6_src_masked(ip: Ipv6Addr, mask: Ipv6Addr) -> Self {
        Self::basic_masked(
            field::IPV6_SRC,
            ip.octets().to_vec(),
            mask.octets().to_vec(),
        )
    }
    pub fn ipv6_dst_masked(ip: Ipv6Addr, mask: Ipv6Addr) -> Self {
        Self::basic_masked(
            field::IPV6_DST,
            ip.octets().to_vec(),
            mask.octets().to_vec(),
        )
    }
    pub fn tcp_src(p: u16) -> Self {
        Self::basic(field::TCP_SRC, p.to_be_bytes().to_vec())
    }
    pub fn tcp_dst(p: u16) -> Self {
        Self::basic(field::TCP_DST, p.to_be_bytes().to_vec())
    }
    pub fn udp_src(p: u16) -> Self {
        Self::basic(field::UDP_SRC, p.to_be_bytes().to_vec())
    }
    pub fn udp_dst(p: u16) -> Self {
        Self::basic(field::UDP_DST, p.to_be_bytes().to_vec())
    }
    pub fn sctp_src(p: u16) -> Self {
        Self::basic(field::SCTP_SRC, p.to_be_bytes().to_vec())
    }
    pub fn sctp_dst(p: u16) -> Self {
        Self::basic(field::SCTP_DST, p.to_be_bytes().to_vec())
    }
    pub fn icmpv4_type(t: u8) -> Self {
        Self::basic(field::ICMPV4_TYPE, vec![t])
    }
    pub fn icmpv4_code(c: u8) -> Self {
        Self::basic(field::ICMPV4_CODE, vec![c])
    }
    pub fn icmpv6_type(t: u8) -> Self {
        Self::basic(field::ICMPV6_TYPE, vec![t])
    }
    pub fn icmpv6_code(c: u8) -> Self {
        Self::basic(field::ICMPV6_CODE, vec![c])
    }
    pub fn arp_op(op: u16) -> Self {
        Self::basic(field::ARP_OP, op.to_be_bytes().to_vec())
    }
    pub fn arp_spa(ip: Ipv4Addr) -> Self {
        Self::basic(field::ARP_SPA, ip.octets().to_vec())
    }
    pub fn arp_tpa(ip: Ipv4Addr) -> Self {
        Self::basic(field::ARP_TPA, ip.octets().to_vec())
    }
    pub fn arp_spa_masked(ip: Ipv4Addr, mask: Ipv4Addr) -> Self {
        Self::basic_masked(field::ARP_SPA, ip.octets().to_vec(), mask.octets().to_vec())
    }
    pub fn arp_tpa_masked(ip: Ipv4Addr, mask: Ipv4Addr) -> Self {
        Self::basic_masked(field::ARP_TPA, ip.octets().to_vec(), mask.octets().to_vec())
    }
    pub fn arp_sha(mac: MacAddr) -> Self {
        Self::basic(field::ARP_SHA, mac.to_vec())
    }
    pub fn arp_tha(mac: MacAddr) -> Self {
        Self::basic(field::ARP_THA, mac.to_vec())
    }
    pub fn ipv6_nd_target(ip: Ipv6Addr) -> Self {
        Self::basic(field::IPV6_ND_TARGET, ip.octets().to_vec())
    }
    pub fn ipv6_nd_sll(mac: MacAddr) -> Self {
        Self::basic(field::IPV6_ND_SLL, mac.to_vec())
    }
    pub fn ipv6_nd_tll(mac: MacAddr) -> Self {
        Self::basic(field::IPV6_ND_TLL, mac.to_vec())
    }
    /// `nd_reserved`: an advertisement's flags word (R 0x8000_0000, S 0x4000_0000,
    /// O 0x2000_0000).
    pub fn nd_reserved(flags: u32) -> Self {
        Self::exact(
            OXM_CLASS_ERICSSON,
            ERIC_ND_RESERVED,
            flags.to_be_bytes().to_vec(),
        )
    }
    /// `nd_options_type`: the type of the first ND option.
    pub fn nd_options_type(t: u8) -> Self {
        Self::exact(OXM_CLASS_ERICSSON, ERIC_ND_OPTIONS_TYPE, vec![t])
    }
    pub fn tunnel_id(id: u64) -> Self {
        Self::basic(field::TUNNEL_ID, id.to_be_bytes().to_vec())
    }
    /// The IP fragment bits ([`frag`]) under `mask`: `ip_frag(frag::ANY, frag::ANY)` is OVS's
    /// `nw_frag=yes`. Needs an IPv4 or IPv6 `eth_type`.
    pub fn ip_frag(value: u8, mask: u8) -> Self {
        OxmField {
            class: OXM_CLASS_NXM1,
            field: NX_IP_FRAG,
            value: vec![value & mask],
            mask: (mask != 0x03).then(|| vec![mask]),
        }
    }
    /// Nicira register `n` (0..15), NXM_NX_REGn.
    pub fn reg(n: u8, value: u32) -> Self {
        Self::exact(OXM_CLASS_NXM1, n & 0x0f, value.to_be_bytes().to_vec())
    }

    pub fn info(&self) -> Option<FieldInfo> {
        field_info(self.class, self.field)
    }

    /// The TLV payload length (value plus mask).
    pub fn payload_len(&self) -> usize {
        self.value.len() + self.mask.as_ref().map_or(0, |m| m.len())
    }

    pub fn encoded_len(&self) -> usize {
        4 + self.payload_len()
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.class.to_be_bytes());
        let hasmask = u8::from(self.mask.is_some());
        out.push((self.field << 1) | hasmask);
        // Payload length is one byte on the wire; constructors keep it small, and a caller that
        // builds an oversized raw field gets a length the switch rejects.
        out.push(u8::try_from(self.payload_len()).unwrap_or(u8::MAX));
        out.extend_from_slice(&self.value);
        if let Some(m) = &self.mask {
            out.extend_from_slice(m);
        }
    }

    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<OxmField> {
        let class = r.u16()?;
        let fh = r.u8()?;
        let len = r.u8()? as usize;
        let field = fh >> 1;
        let hasmask = fh & 1 == 1;
        let payload = r.bytes(len)?;
        // The experimenter id sits before value and mask and is not masked.
        let id_len = if class == OXM_CLASS_EXPERIMENTER {
            4
        } else {
            0
        };
        if len < id_len {
            return Err(DecodeError::BadLength {
                what: "experimenter OXM",
                len,
            });
        }
        let body = &payload[id_len..];
        if let Some(fi) = field_info(class, field) {
            let want = if hasmask { fi.len * 2 } else { fi.len };
            if body.len() != want || (hasmask && !fi.maskable) {
                return Err(DecodeError::Invalid {
                    what: "OXM field",
                    detail: format!(
                        "{} with length {len}{} (expected {want})",
                        fi.name,
                        if hasmask { " and mask" } else { "" }
                    ),
                });
            }
        }
        if hasmask {
            if !body.len().is_multiple_of(2) {
                return Err(DecodeError::BadLength {
                    what: "masked OXM field",
                    len,
                });
            }
            let half = body.len() / 2;
            let mut value = payload[..id_len].to_vec();
            value.extend_from_slice(&body[..half]);
            Ok(OxmField {
                class,
                field,
                value,
                mask: Some(body[half..].to_vec()),
            })
        } else {
            Ok(OxmField {
                class,
                field,
                value: payload.to_vec(),
                mask: None,
            })
        }
    }

    /// The same field with the mask applied to the value and redundant masks dropped, as a
    /// switch stores it: an all-ones mask means exact match. Returns None for an all-zero
    /// mask (the field matches anything and switches omit it).
    pub fn normalized(&self) -> Option<OxmField> {
        let Some(mask) = &self.mask else {
            return Some(self.clone());
        };
        let id_len = if self.class == OXM_CLASS_EXPERIMENTER {
            4
        } else {
            0
        };
        if self.value.len() < id_len || self.value.len() - id_len != mask.len() {
            return Some(self.clone());
        }
        if mask.iter().all(|&b| b == 0xff) {
            return Some(OxmField {
                mask: None,
                ..self.clone()
            });
        }
        if mask.iter().all(|&b| b == 0) {
            return None;
        }
        let mut value = self.value.clone();
        for (v, m) in value[id_len..].iter_mut().zip(mask) {
            *v &= m;
        }
        Some(OxmField {
            value,
            ..self.clone()
        })
    }

    /// The value as an unsigned integer (fields up to 8 bytes).
    pub fn value_u64(&self) -> Option<u64> {
        if self.value.len() > 8 {
            return None;
        }
        Some(
            self.value
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)),
        )
    }
}

/// An OXM match: the fields in the order they are emitted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Match {
    pub fields: Vec<OxmField>,
}

impl Match {
    pub fn new() -> Self {
        Match::default()
    }

    /// Builder: add a field.
    pub fn with(mut self, f: OxmField) -> Self {
        self.fields.push(f);
        self
    }

    pub fn push(&mut self, f: OxmField) {
        self.fields.push(f);
    }

    pub fn get(&self, class: u16, field: u8) -> Option<&OxmField> {
        self.fields
            .iter()
            .find(|f| f.class == class && f.field == field)
    }

    pub fn basic(&self, field: u8) -> Option<&OxmField> {
        self.get(OXM_CLASS_OPENFLOW_BASIC, field)
    }

    /// Canonical form for comparison with what a switch reports: masks applied and redundant
    /// ones dropped, the OpenFlow basic fields first, sorted by field number, then the other
    /// classes by (class, field). That order puts prerequisites (eth_type, ip_proto, icmp type)
    /// before the fields that need them, the Nicira fragment bits after eth_type included,
    /// which Open vSwitch requires when it parses a match.
    pub fn normalized(&self) -> Match {
        let mut fields: Vec<OxmField> = self
            .fields
            .iter()
            .filter_map(OxmField::normalized)
            .collect();
        fields.sort_by(|a, b| {
            (a.class != OXM_CLASS_OPENFLOW_BASIC, a).cmp(&(b.class != OXM_CLASS_OPENFLOW_BASIC, b))
        });
        fields.dedup();
        Match { fields }
    }

    /// Length of `struct ofp_match` without its trailing padding.
    pub fn unpadded_len(&self) -> usize {
        4 + self.fields.iter().map(OxmField::encoded_len).sum::<usize>()
    }

    /// Length on the wire, padding included.
    pub fn encoded_len(&self) -> usize {
        let l = self.unpadded_len();
        l + pad8(l)
    }

    pub fn emit(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&OFPMT_OXM.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        for f in &self.fields {
            f.emit(out);
        }
        let len = out.len() - start;
        patch_u16(out, start + 2, len16(len));
        put_zeros(out, pad8(len));
    }

    /// Parse `struct ofp_match` including its padding.
    pub(crate) fn parse(r: &mut Reader<'_>) -> Result<Match> {
        let mtype = r.u16()?;
        let len = r.u16()? as usize;
        if mtype != OFPMT_OXM {
            return Err(DecodeError::Invalid {
                what: "ofp_match",
                detail: format!("type {mtype} (only OXM = 1 is OpenFlow 1.3)"),
            });
        }
        if len < 4 {
            return Err(DecodeError::BadLength {
                what: "ofp_match",
                len,
            });
        }
        let mut fr = r.sub(len - 4, "ofp_match fields")?;
        let mut fields = Vec::new();
        while !fr.is_empty() {
            fields.push(OxmField::parse(&mut fr)?);
        }
        r.skip(pad8(len))?;
        Ok(Match { fields })
    }

    /// Parse a standalone match from bytes (as carried in a message).
    pub fn decode(buf: &[u8]) -> Result<Match> {
        Match::parse(&mut Reader::new(buf, "ofp_match"))
    }
}
