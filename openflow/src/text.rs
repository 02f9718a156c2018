//! The ovs-ofctl text form of matches, actions, instructions and flows.
//!
//! The output follows what Open vSwitch 3.1 prints (`match_format`, `ofpacts_format`,
//! `ofputil_flow_stats_format`), so a line rendered here can be compared verbatim with
//! `ovs-ofctl -O OpenFlow13 --no-names [--no-stats] dump-flows`. That is checked against the
//! real tool in `tests/text_vs_ofctl.rs`.
//!
//! Rendering never fails: what OVS itself would not print (unknown OXM classes, raw actions,
//! fields outside their prerequisites) is still written out, in a readable generic form, so no
//! part of a flow is silently hidden.

use crate::action::{Action, port};
use crate::flow_mod::{FlowMod, FlowModCommand, GROUP_ANY, TABLE_ALL, flow_mod_flags};
use crate::instruction::Instruction;
use crate::multipart::FlowStats;
use crate::oxm::{
    ERIC_ND_OPTIONS_TYPE, ERIC_ND_RESERVED, Match, OFPVID_PRESENT, OXM_CLASS_ERICSSON,
    OXM_CLASS_NXM0, OXM_CLASS_NXM1, OXM_CLASS_OPENFLOW_BASIC, OxmField, eth_type, field,
    field_info, ip_proto,
};
use std::fmt::{self, Display, Formatter, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};

/// OpenFlow's default priority; OVS leaves it out of a match's text.
pub const DEFAULT_PRIORITY: u16 = 0x8000;

// ---------------------------------------------------------------------------------------------
// Small formatters with C printf semantics where OVS relies on them.

/// `%#x`: C prints zero without the `0x` prefix.
fn c_hex(v: u64) -> String {
    if v == 0 {
        "0".to_owned()
    } else {
        format!("{v:#x}")
    }
}

/// OVS `ds_put_hex`: big-endian bytes as a minimal hex number, `0` when all zero.
fn ds_hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        if s.is_empty() {
            if b != 0 {
                let _ = write!(s, "0x{b:x}");
            }
        } else {
            let _ = write!(s, "{b:02x}");
        }
    }
    if s.is_empty() {
        s.push('0');
    }
    s
}

fn be_uint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

fn mac(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(17);
    for (i, b) in bytes.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn ipv4(bytes: &[u8]) -> String {
    match <[u8; 4]>::try_from(bytes) {
        Ok(a) => Ipv4Addr::from(a).to_string(),
        Err(_) => ds_hex(bytes),
    }
}

/// IPv6 as glibc's `inet_ntop` writes it (which OVS uses): like RFC 5952, except that an
/// IPv4-compatible address (`::a.b.c.d`) keeps its dotted tail, which Rust's `Display` drops.
fn ipv6(bytes: &[u8]) -> String {
    let Ok(a) = <[u8; 16]>::try_from(bytes) else {
        return ds_hex(bytes);
    };
    let ip = Ipv6Addr::from(a);
    let w = ip.segments();
    // Longest (first) run of zero words, if at least two long.
    // (start, length) of zero-word runs.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, &word) in w.iter().enumerate() {
        if word == 0 {
            cur = Some(cur.map_or((i, 1), |(b, l)| (b, l + 1)));
            if let Some(c) = cur
                && best.is_none_or(|b| c.1 > b.1)
            {
                best = Some(c);
            }
        } else {
            cur = None;
        }
    }
    let best = best.filter(|&(_, l)| l >= 2);
    let mut s = String::new();
    let mut i = 0;
    while i < 8 {
        if let Some((b, l)) = best
            && i >= b
            && i < b + l
        {
            if i == b {
                s.push(':');
            }
            i += 1;
            continue;
        }
        if i != 0 {
            s.push(':');
        }
        if i == 6
            && let Some((0, l)) = best
            && (l == 6 || (l == 5 && w[5] == 0xffff))
        {
            let _ = write!(s, "{}.{}.{}.{}", a[12], a[13], a[14], a[15]);
            return s;
        }
        let _ = write!(s, "{:x}", w[i]);
        i += 1;
    }
    if let Some((b, l)) = best
        && b + l == 8
    {
        s.push(':');
    }
    s
}

/// Prefix length of a CIDR mask (ones then zeros), or None.
fn cidr_bits(mask: &[u8]) -> Option<u32> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let n = ones as usize;
    let is_cidr = mask.iter().enumerate().all(|(i, &b)| {
        let want_ones = n.saturating_sub(i * 8).min(8);
        let want = if want_ones == 0 {
            0
        } else {
            0xffu8 << (8 - want_ones)
        };
        b == want
    });
    is_cidr.then_some(ones)
}

fn all_ones(m: &[u8]) -> bool {
    m.iter().all(|&b| b == 0xff)
}

fn ip_masked(value: &[u8], mask: Option<&[u8]>, v6: bool) -> String {
    let fmt = |b: &[u8]| if v6 { ipv6(b) } else { ipv4(b) };
    let mut s = fmt(value);
    if let Some(m) = mask
        && !all_ones(m)
    {
        match cidr_bits(m) {
            Some(bits) => {
                let _ = write!(s, "/{bits}");
            }
            None => {
                let _ = write!(s, "/{}", fmt(m));
            }
        }
    }
    s
}

fn mac_masked(value: &[u8], mask: Option<&[u8]>) -> String {
    let mut s = mac(value);
    if let Some(m) = mask
        && !all_ones(m)
    {
        let _ = write!(s, "/{}", mac(m));
    }
    s
}

/// A port number as OVS names it (`ofputil_format_port`, no port names).
pub fn port_name(p: u32) -> String {
    match p {
        port::IN_PORT => "IN_PORT".into(),
        port::TABLE => "TABLE".into(),
        port::NORMAL => "NORMAL".into(),
        port::FLOOD => "FLOOD".into(),
        port::ALL => "ALL".into(),
        port::CONTROLLER => "CONTROLLER".into(),
        port::LOCAL => "LOCAL".into(),
        port::ANY => "ANY".into(),
        0xffff_fff7 => "UNSET".into(),
        // OVS maps the rest of the reserved range down to its 16-bit port space.
        p if p >= port::MAX => (p - 0xffff_0000).to_string(),
        p => p.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Matches.

/// A field that OVS does not know, or that sits outside its prerequisites: written as
/// `NAME=VALUE[/MASK]` with hex values so nothing is lost.
fn generic_field(f: &OxmField) -> String {
    let name = match f.info() {
        Some(fi) => fi.name.to_owned(),
        None => format!("oxm(class={:#06x},field={})", f.class, f.field),
    };
    let mut s = format!("{name}={}", ds_hex(&f.value));
    if let Some(m) = &f.mask {
        let _ = write!(s, "/{}", ds_hex(m));
    }
    s
}

struct MatchText {
    fields: Vec<OxmField>,
    used: Vec<bool>,
    parts: Vec<String>,
}

impl MatchText {
    fn new(m: &Match) -> Self {
        // What the switch stores: masks applied, all-ones masks dropped, wildcards gone.
        let fields: Vec<OxmField> = m.fields.iter().filter_map(OxmField::normalized).collect();
        let used = vec![false; fields.len()];
        MatchText {
            fields,
            used,
            parts: Vec::new(),
        }
    }

    fn peek(&self, class: u16, fld: u8) -> Option<&OxmField> {
        self.fields
            .iter()
            .find(|f| f.class == class && f.field == fld)
    }

    /// Take a field whose value (and mask) has the expected width; a malformed one is left
    /// for the generic form at the end.
    fn take_width(&mut self, class: u16, fld: u8, want: usize) -> Option<OxmField> {
        let i = self.fields.iter().enumerate().position(|(i, f)| {
            !self.used[i]
                && f.class == class
                && f.field == fld
                && f.value.len() == want
                && f.mask.as_ref().is_none_or(|m| m.len() == want)
        })?;
        self.used[i] = true;
        self.fields.get(i).cloned()
    }

    fn take_basic(&mut self, fld: u8) -> Option<OxmField> {
        let want = field_info(OXM_CLASS_OPENFLOW_BASIC, fld).map(|fi| fi.len)?;
        self.take_width(OXM_CLASS_OPENFLOW_BASIC, fld, want)
    }

    fn basic_u64(&self, fld: u8) -> Option<u64> {
        let want = field_info(OXM_CLASS_OPENFLOW_BASIC, fld).map(|fi| fi.len)?;
        self.peek(OXM_CLASS_OPENFLOW_BASIC, fld)
            .filter(|f| f.value.len() == want && f.mask.is_none())
            .map(|f| be_uint(&f.value))
    }

    fn push(&mut self, s: String) {
        self.parts.push(s);
    }

    /// `format_uint32_masked` / `format_be64_masked`: `%#x[/%#x]`.
    fn hex_masked(&mut self, name: &str, f: &OxmField) {
        let mut s = format!("{name}={}", c_hex(be_uint(&f.value)));
        if let Some(m) = &f.mask {
            let _ = write!(s, "/{}", c_hex(be_uint(m)));
        }
        self.push(s);
    }

    /// `format_be16_masked`: decimal when exact, hex pair when masked.
    fn be16_masked(&mut self, name: &str, f: &OxmField) {
        let v = be_uint(&f.value);
        let s = match &f.mask {
            None => format!("{name}={v}"),
            Some(m) => format!("{name}={v:#x}/{:#x}", be_uint(m)),
        };
        self.push(s);
    }

    fn ip(&mut self, name: &str, f: &OxmField, v6: bool) {
        let s = format!("{name}={}", ip_masked(&f.value, f.mask.as_deref(), v6));
        self.push(s);
    }

    fn eth(&mut self, name: &str, f: &OxmField) {
        let s = format!("{name}={}", mac_masked(&f.value, f.mask.as_deref()));
        self.push(s);
    }

    /// Field order and names of OVS's `match_format`.
    fn render(mut self) -> Vec<String> {
        use field as F;
        let dl_type = self.basic_u64(F::ETH_TYPE).map(|v| v as u16);
        let nw_proto = self.basic_u64(F::IP_PROTO).map(|v| v as u8);

        // Protocol shorthand replaces eth_type (and ip_proto where it has a name).
        let mut skip_type = false;
        let mut skip_proto = false;
        if let Some(t) = dl_type {
            let short = match t {
                eth_type::IPV4 => Some(match nw_proto {
                    Some(ip_proto::ICMP) => "icmp",
                    Some(2) => "igmp",
                    Some(ip_proto::TCP) => "tcp",
                    Some(ip_proto::UDP) => "udp",
                    Some(ip_proto::SCTP) => "sctp",
                    _ => "ip",
                }),
                eth_type::IPV6 => Some(match nw_proto {
                    Some(ip_proto::ICMPV6) => "icmp6",
                    Some(ip_proto::TCP) => "tcp6",
                    Some(ip_proto::UDP) => "udp6",
                    Some(ip_proto::SCTP) => "sctp6",
                    _ => "ipv6",
                }),
                eth_type::ARP => Some("arp"),
                0x8035 => Some("rarp"),
                0x8847 => Some("mpls"),
                0x8848 => Some("mplsm"),
                _ => None,
            };
            if let Some(short) = short {
                skip_type = true;
                skip_proto = !matches!(short, "ip" | "ipv6" | "arp" | "rarp" | "mpls" | "mplsm");
                self.take_basic(F::ETH_TYPE);
                if skip_proto {
                    self.take_basic(F::IP_PROTO);
                }
                self.push(short.to_owned());
            }
        }

        for n in 0..16u8 {
            if let Some(f) = self.take_width(OXM_CLASS_NXM1, n, 4) {
                self.hex_masked(&format!("reg{n}"), &f);
            }
        }
        if let Some(f) = self.take_basic(F::TUNNEL_ID) {
            self.hex_masked("tun_id", &f);
        }
        if let Some(f) = self.take_basic(F::METADATA) {
            self.hex_masked("metadata", &f);
        }
        if let Some(f) = self.take_basic(F::IN_PORT) {
            let s = format!("in_port={}", port_name(be_uint(&f.value) as u32));
            self.push(s);
        }
        self.vlan();
        if let Some(f) = self.take_basic(F::ETH_SRC) {
            self.eth("dl_src", &f);
        }
        if let Some(f) = self.take_basic(F::ETH_DST) {
            self.eth("dl_dst", &f);
        }
        if !skip_type && let Some(f) = self.take_basic(F::ETH_TYPE) {
            let s = format!("dl_type={:#06x}", be_uint(&f.value));
            self.push(s);
        }
        let is_arp = matches!(dl_type, Some(eth_type::ARP | 0x8035));
        match dl_type {
            Some(eth_type::IPV6) => {
                if let Some(f) = self.take_basic(F::IPV6_SRC) {
                    self.ip("ipv6_src", &f, true);
                }
                if let Some(f) = self.take_basic(F::IPV6_DST) {
                    self.ip("ipv6_dst", &f, true);
                }
                if let Some(f) = self.take_basic(F::IPV6_FLABEL) {
                    let mut s = format!("ipv6_label=0x{:05x}", be_uint(&f.value));
                    if let Some(m) = &f.mask {
                        let _ = write!(s, "/0x{:05x}", be_uint(m));
                    }
                    self.push(s);
                }
            }
            _ if is_arp => {
                if let Some(f) = self.take_basic(F::ARP_SPA) {
                    self.ip("arp_spa", &f, false);
                }
                if let Some(f) = self.take_basic(F::ARP_TPA) {
                    self.ip("arp_tpa", &f, false);
                }
            }
            _ => {
                if let Some(f) = self.take_basic(F::IPV4_SRC) {
                    self.ip("nw_src", &f, false);
                }
                if let Some(f) = self.take_basic(F::IPV4_DST) {
                    self.ip("nw_dst", &f, false);
                }
            }
        }
        if is_arp {
            if let Some(f) = self.take_basic(F::ARP_OP) {
                let s = format!("arp_op={}", be_uint(&f.value));
                self.push(s);
            }
        } else if !skip_proto && let Some(f) = self.take_basic(F::IP_PROTO) {
            let s = format!("nw_proto={}", be_uint(&f.value));
            self.push(s);
        }
        if is_arp {
            if let Some(f) = self.take_basic(F::ARP_SHA) {
                self.eth("arp_sha", &f);
            }
            if let Some(f) = self.take_basic(F::ARP_THA) {
                self.eth("arp_tha", &f);
            }
        }
        if let Some(f) = self.take_basic(F::IP_DSCP) {
            // OVS shows the DSCP in its place in the TOS byte.
            let s = format!("nw_tos={}", (be_uint(&f.value) & 0x3f) << 2);
            self.push(s);
        }
        if let Some(f) = self.take_basic(F::IP_ECN) {
            let s = format!("nw_ecn={}", be_uint(&f.value) & 0x3);
            self.push(s);
        }
        if let Some(f) = self.take_width(OXM_CLASS_NXM1, crate::oxm::NX_IP_FRAG, 1) {
            self.push(nw_frag_text(&f));
        }
        for (fld, name) in [
            (F::MPLS_LABEL, "mpls_label"),
            (F::MPLS_TC, "mpls_tc"),
            (F::MPLS_BOS, "mpls_bos"),
        ] {
            if let Some(f) = self.take_basic(fld) {
                let s = format!("{name}={}", be_uint(&f.value));
                self.push(s);
            }
        }
        match (dl_type, nw_proto) {
            (Some(eth_type::IPV4), Some(ip_proto::ICMP)) => {
                if let Some(f) = self.take_basic(F::ICMPV4_TYPE) {
                    self.be16_masked("icmp_type", &f);
                }
                if let Some(f) = self.take_basic(F::ICMPV4_CODE) {
                    self.be16_masked("icmp_code", &f);
                }
            }
            (Some(eth_type::IPV6), Some(ip_proto::ICMPV6)) => {
                if let Some(f) = self.take_basic(F::ICMPV6_TYPE) {
                    self.be16_masked("icmp_type", &f);
                }
                if let Some(f) = self.take_basic(F::ICMPV6_CODE) {
                    self.be16_masked("icmp_code", &f);
                }
                if let Some(f) = self.take_basic(F::IPV6_ND_TARGET) {
                    self.ip("nd_target", &f, true);
                }
                if let Some(f) = self.take_basic(F::IPV6_ND_SLL) {
                    self.eth("nd_sll", &f);
                }
                if let Some(f) = self.take_basic(F::IPV6_ND_TLL) {
                    self.eth("nd_tll", &f);
                }
            }
            _ => {
                let src = [F::TCP_SRC, F::UDP_SRC, F::SCTP_SRC]
                    .into_iter()
                    .find_map(|fl| self.take_basic(fl));
                if let Some(f) = src {
                    self.be16_masked("tp_src", &f);
                }
                let dst = [F::TCP_DST, F::UDP_DST, F::SCTP_DST]
                    .into_iter()
                    .find_map(|fl| self.take_basic(fl));
                if let Some(f) = dst {
                    self.be16_masked("tp_dst", &f);
                }
            }
        }
        // Whatever OVS would not place (unknown fields, fields outside their prerequisites).
        let rest: Vec<String> = self
            .fields
            .iter()
            .zip(&self.used)
            .filter(|(_, u)| !**u)
            .map(|(f, _)| generic_field(f))
            .collect();
        self.parts.extend(rest);
        self.parts
    }

    /// VLAN_VID and VLAN_PCP folded into a TCI as OVS stores it, then printed as `dl_vlan`,
    /// `dl_vlan_pcp` or `vlan_tci` by the same rules as OVS.
    fn vlan(&mut self) {
        let vid = self.take_basic(field::VLAN_VID);
        let pcp = self.take_basic(field::VLAN_PCP);
        if vid.is_none() && pcp.is_none() {
            return;
        }
        const VID_MASK: u16 = 0x0fff;
        const PCP_MASK: u16 = 0xe000;
        const CFI: u16 = OFPVID_PRESENT;
        let (mut tci, mut mask) = (0u16, 0u16);
        if let Some(f) = &vid {
            let m = f.mask.as_deref().map_or(0xffff, |m| be_uint(m) as u16) & (VID_MASK | CFI);
            tci = (be_uint(&f.value) as u16) & m;
            mask = m;
        }
        if let Some(f) = &pcp {
            tci |= CFI | (((be_uint(&f.value) as u16) & 7) << 13);
            mask |= CFI | PCP_MASK;
        }
        let vid_mask = mask & VID_MASK;
        let pcp_mask = mask & PCP_MASK;
        if mask & CFI != 0
            && tci & CFI != 0
            && (vid_mask == 0 || vid_mask == VID_MASK)
            && (pcp_mask == 0 || pcp_mask == PCP_MASK)
            && (vid_mask != 0 || pcp_mask != 0)
        {
            if vid_mask != 0 {
                self.push(format!("dl_vlan={}", tci & VID_MASK));
            }
            if pcp_mask != 0 {
                self.push(format!("dl_vlan_pcp={}", tci >> 13));
            }
        } else if mask == 0xffff {
            self.push(format!("vlan_tci=0x{tci:04x}"));
        } else {
            self.push(format!("vlan_tci=0x{tci:04x}/0x{mask:04x}"));
        }
    }
}

impl Match {
    /// The match as the comma-separated parts OVS prints, in OVS's order.
    pub fn text_parts(&self) -> Vec<String> {
        MatchText::new(self).render()
    }
}

impl Display for Match {
    /// `ovs-ofctl` match syntax, e.g. `tcp,in_port=1,nw_dst=192.0.2.10,tp_dst=80`. An empty
    /// match (all wildcards) is an empty string, as OVS prints it.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text_parts().join(","))
    }
}

impl Display for OxmField {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let m = Match {
            fields: vec![self.clone()],
        };
        let parts = MatchText::new(&m).render();
        if parts.is_empty() {
            // An all-zero mask: the field matches anything.
            write!(f, "{}", generic_field(self))
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Actions and instructions.

/// OVS's words for the fragment bits (`nw_frag=yes|no|first|later|not_later`).
fn nw_frag_text(f: &OxmField) -> String {
    use crate::oxm::frag::{ANY, LATER};
    let value = f.value.first().copied().unwrap_or(0);
    let mask = f
        .mask
        .as_ref()
        .and_then(|m| m.first().copied())
        .unwrap_or(ANY | LATER);
    let word = match (value & mask, mask & (ANY | LATER)) {
        (0, ANY) | (0, 0x03) => "no",
        (ANY, ANY) => "yes",
        (ANY, 0x03) => "first",
        (0x03, 0x03) | (LATER, LATER) => "later",
        (0, LATER) => "not_later",
        _ => return format!("nw_frag={value:#x}/{mask:#x}"),
    };
    format!("nw_frag={word}")
}

/// How OVS writes a field's value in `set_field` (`mf_format`) and the field's name there.
fn set_field_text(f: &OxmField) -> String {
    use field as F;
    enum Kind {
        Dec,
        Hex,
        Mac,
        V4,
        V6,
        Port,
    }
    let known = match (f.class, f.field) {
        (OXM_CLASS_NXM1, n) if n < 16 => Some((Kind::Hex, format!("reg{n}"))),
        (OXM_CLASS_ERICSSON, ERIC_ND_RESERVED) => Some((Kind::Dec, "nd_reserved".to_owned())),
        (OXM_CLASS_ERICSSON, ERIC_ND_OPTIONS_TYPE) => {
            Some((Kind::Dec, "nd_options_type".to_owned()))
        }
        (OXM_CLASS_OPENFLOW_BASIC, fl) => {
            let (k, name) = match fl {
                F::IN_PORT => (Kind::Port, "in_port_oxm"),
                F::METADATA => (Kind::Hex, "metadata"),
                F::ETH_DST => (Kind::Mac, "eth_dst"),
                F::ETH_SRC => (Kind::Mac, "eth_src"),
                F::ETH_TYPE => (Kind::Hex, "eth_type"),
                F::VLAN_VID => (Kind::Dec, "vlan_vid"),
                F::VLAN_PCP => (Kind::Dec, "vlan_pcp"),
                F::IP_DSCP => (Kind::Dec, "ip_dscp"),
                F::IP_ECN => (Kind::Dec, "nw_ecn"),
                F::IP_PROTO => (Kind::Dec, "nw_proto"),
                F::IPV4_SRC => (Kind::V4, "ip_src"),
                F::IPV4_DST => (Kind::V4, "ip_dst"),
                F::TCP_SRC => (Kind::Dec, "tcp_src"),
                F::TCP_DST => (Kind::Dec, "tcp_dst"),
                F::UDP_SRC => (Kind::Dec, "udp_src"),
                F::UDP_DST => (Kind::Dec, "udp_dst"),
                F::SCTP_SRC => (Kind::Dec, "sctp_src"),
                F::SCTP_DST => (Kind::Dec, "sctp_dst"),
                F::ICMPV4_TYPE => (Kind::Dec, "icmp_type"),
                F::ICMPV4_CODE => (Kind::Dec, "icmp_code"),
                F::ARP_OP => (Kind::Dec, "arp_op"),
                F::ARP_SPA => (Kind::V4, "arp_spa"),
                F::ARP_TPA => (Kind::V4, "arp_tpa"),
                F::ARP_SHA => (Kind::Mac, "arp_sha"),
                F::ARP_THA => (Kind::Mac, "arp_tha"),
                F::IPV6_SRC => (Kind::V6, "ipv6_src"),
                F::IPV6_DST => (Kind::V6, "ipv6_dst"),
                F::IPV6_FLABEL => (Kind::Hex, "ipv6_label"),
                F::ICMPV6_TYPE => (Kind::Dec, "icmpv6_type"),
                F::ICMPV6_CODE => (Kind::Dec, "icmpv6_code"),
                F::IPV6_ND_TARGET => (Kind::V6, "nd_target"),
                F::IPV6_ND_SLL => (Kind::Mac, "nd_sll"),
                F::IPV6_ND_TLL => (Kind::Mac, "nd_tll"),
                F::MPLS_LABEL => (Kind::Dec, "mpls_label"),
                F::MPLS_TC => (Kind::Dec, "mpls_tc"),
                F::MPLS_BOS => (Kind::Dec, "mpls_bos"),
                F::TUNNEL_ID => (Kind::Hex, "tun_id"),
                _ => return format!("set_field:{}", generic_set_field(f)),
            };
            Some((k, name.to_owned()))
        }
        _ => None,
    };
    let Some((kind, name)) = known.filter(|_| f.info().is_some_and(|fi| fi.len == f.value.len()))
    else {
        return format!("set_field:{}", generic_set_field(f));
    };
    let v = &f.value;
    let mut s = match kind {
        Kind::Dec => be_uint(v).to_string(),
        Kind::Hex => ds_hex(v),
        Kind::Mac => mac(v),
        Kind::V4 => ipv4(v),
        Kind::V6 => ipv6(v),
        Kind::Port => port_name(be_uint(v) as u32),
    };
    if let Some(m) = &f.mask {
        let _ = write!(s, "/{}", ds_hex(m));
    }
    format!("set_field:{s}->{name}")
}

fn generic_set_field(f: &OxmField) -> String {
    let name = match f.info() {
        Some(fi) => fi.name.to_owned(),
        None => format!("oxm(class={:#06x},field={})", f.class, f.field),
    };
    let mut s = ds_hex(&f.value);
    if let Some(m) = &f.mask {
        let _ = write!(s, "/{}", ds_hex(m));
    }
    format!("{s}->{name}")
}

/// Name and width of a field named by a 32-bit NXM/OXM header, as OVS writes subfields
/// (`mf_format_subfield` prefers the NXM name of a field).
fn nxm_field(header: u32) -> (String, u32) {
    let class = (header >> 16) as u16;
    let fld = ((header >> 9) & 0x7f) as u8;
    let len_bits = (header & 0xff) * 8;
    let nxm0 = [
        ("NXM_OF_IN_PORT", 16),
        ("NXM_OF_ETH_DST", 48),
        ("NXM_OF_ETH_SRC", 48),
        ("NXM_OF_ETH_TYPE", 16),
        ("NXM_OF_VLAN_TCI", 16),
        ("NXM_OF_IP_TOS", 8),
        ("NXM_OF_IP_PROTO", 8),
        ("NXM_OF_IP_SRC", 32),
        ("NXM_OF_IP_DST", 32),
        ("NXM_OF_TCP_SRC", 16),
        ("NXM_OF_TCP_DST", 16),
        ("NXM_OF_UDP_SRC", 16),
        ("NXM_OF_UDP_DST", 16),
        ("NXM_OF_ICMP_TYPE", 8),
        ("NXM_OF_ICMP_CODE", 8),
        ("NXM_OF_ARP_OP", 16),
        ("NXM_OF_ARP_SPA", 32),
        ("NXM_OF_ARP_TPA", 32),
    ];
    let nxm1 = [
        ("NXM_NX_TUN_ID", 64),
        ("NXM_NX_ARP_SHA", 48),
        ("NXM_NX_ARP_THA", 48),
        ("NXM_NX_IPV6_SRC", 128),
        ("NXM_NX_IPV6_DST", 128),
        ("NXM_NX_ICMPV6_TYPE", 8),
        ("NXM_NX_ICMPV6_CODE", 8),
        ("NXM_NX_ND_TARGET", 128),
        ("NXM_NX_ND_SLL", 48),
        ("NXM_NX_ND_TLL", 48),
    ];
    use field as F;
    let found: Option<(&str, u32)> = match class {
        OXM_CLASS_NXM0 => nxm0.get(fld as usize).copied(),
        OXM_CLASS_NXM1 if fld < 16 => return (format!("NXM_NX_REG{fld}"), 32),
        OXM_CLASS_NXM1 => nxm1.get(fld as usize - 16).copied(),
        OXM_CLASS_OPENFLOW_BASIC => match fld {
            F::IN_PORT => Some(("OXM_OF_IN_PORT", 32)),
            F::METADATA => Some(("OXM_OF_METADATA", 64)),
            F::ETH_DST => nxm0.get(1).copied(),
            F::ETH_SRC => nxm0.get(2).copied(),
            F::ETH_TYPE => nxm0.get(3).copied(),
            F::VLAN_VID => Some(("OXM_OF_VLAN_VID", 12)),
            F::VLAN_PCP => Some(("OXM_OF_VLAN_PCP", 3)),
            F::IP_DSCP => Some(("OXM_OF_IP_DSCP", 6)),
            F::IP_ECN => Some(("NXM_NX_IP_ECN", 2)),
            F::IP_PROTO => nxm0.get(6).copied(),
            F::IPV4_SRC => nxm0.get(7).copied(),
            F::IPV4_DST => nxm0.get(8).copied(),
            F::TCP_SRC => nxm0.get(9).copied(),
            F::TCP_DST => nxm0.get(10).copied(),
            F::UDP_SRC => nxm0.get(11).copied(),
            F::UDP_DST => nxm0.get(12).copied(),
            F::SCTP_SRC => Some(("OXM_OF_SCTP_SRC", 16)),
            F::SCTP_DST => Some(("OXM_OF_SCTP_DST", 16)),
            F::ICMPV4_TYPE => nxm0.get(13).copied(),
            F::ICMPV4_CODE => nxm0.get(14).copied(),
            F::ARP_OP => nxm0.get(15).copied(),
            F::ARP_SPA => nxm0.get(16).copied(),
            F::ARP_TPA => nxm0.get(17).copied(),
            F::ARP_SHA => nxm1.first().copied(),
            F::ARP_THA => nxm1.get(1).copied(),
            F::IPV6_SRC => nxm1.get(3).copied(),
            F::IPV6_DST => nxm1.get(4).copied(),
            F::IPV6_FLABEL => Some(("NXM_NX_IPV6_LABEL", 20)),
            F::ICMPV6_TYPE => nxm1.get(5).copied(),
            F::ICMPV6_CODE => nxm1.get(6).copied(),
            F::IPV6_ND_TARGET => nxm1.get(7).copied(),
            F::IPV6_ND_SLL => nxm1.get(8).copied(),
            F::IPV6_ND_TLL => nxm1.get(9).copied(),
            F::MPLS_LABEL => Some(("OXM_OF_MPLS_LABEL", 20)),
            F::MPLS_TC => Some(("OXM_OF_MPLS_TC", 3)),
            F::MPLS_BOS => Some(("OXM_OF_MPLS_BOS", 1)),
            F::TUNNEL_ID => nxm1.first().map(|_| ("NXM_NX_TUN_ID", 64)),
            _ => None,
        },
        _ => None,
    };
    match found {
        Some((n, bits)) => (n.to_owned(), bits),
        None => (format!("oxm({header:#010x})"), len_bits),
    }
}

fn subfield(header: u32, ofs: u16, n_bits: u16) -> String {
    let (name, width) = nxm_field(header);
    let (ofs, n) = (u32::from(ofs), u32::from(n_bits));
    if ofs == 0 && n == width {
        format!("{name}[]")
    } else if n == 1 {
        format!("{name}[{ofs}]")
    } else {
        format!("{name}[{ofs}..{}]", (ofs + n).saturating_sub(1))
    }
}

impl Display for Action {
    /// One action as `ovs-ofctl` prints it (`ofpact_format`).
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Action::Output { port: p, max_len } => {
                // Below the reserved range OVS writes `output:N` (ports it cannot map are kept numeric).
                if *p < port::MAX {
                    write!(f, "output:{p}")
                } else if *p == port::CONTROLLER {
                    write!(f, "CONTROLLER:{max_len}")
                } else {
                    f.write_str(&port_name(*p))
                }
            }
            Action::CopyTtlOut => f.write_str("copy_ttl_out"),
            Action::CopyTtlIn => f.write_str("copy_ttl_in"),
            Action::SetMplsTtl(t) => write!(f, "set_mpls_ttl({t})"),
            Action::DecMplsTtl => f.write_str("dec_mpls_ttl"),
            Action::PushVlan(e) => write!(f, "push_vlan:{e:#x}"),
            Action::PopVlan => f.write_str("pop_vlan"),
            Action::PushMpls(e) => write!(f, "push_mpls:0x{e:04x}"),
            Action::PopMpls(e) => write!(f, "pop_mpls:0x{e:04x}"),
            Action::SetQueue(q) => write!(f, "set_queue:{q}"),
            Action::Group(g) => write!(f, "group:{g}"),
            Action::SetNwTtl(t) => write!(f, "mod_nw_ttl:{t}"),
            Action::DecNwTtl => f.write_str("dec_ttl"),
            Action::SetField(fld) => f.write_str(&set_field_text(fld)),
            Action::PushPbb(e) => write!(f, "push_pbb:0x{e:04x}"),
            Action::PopPbb => f.write_str("pop_pbb"),
            Action::RegMove {
                n_bits,
                src_ofs,
                dst_ofs,
                src,
                dst,
            } => write!(
                f,
                "move:{}->{}",
                subfield(*src, *src_ofs, *n_bits),
                subfield(*dst, *dst_ofs, *n_bits)
            ),
            Action::Resubmit { in_port, table } => {
                f.write_str("resubmit(")?;
                if *in_port != crate::action::NX_RESUBMIT_IN_PORT {
                    write!(f, "{in_port}")?;
                }
                write!(f, ",{table})")
            }
            Action::Experimenter { experimenter, data } => {
                write!(f, "experimenter({experimenter:#010x}")?;
                if !data.is_empty() {
                    write!(f, ",data={}", hex_bytes(data))?;
                }
                f.write_str(")")
            }
            Action::Unknown { action_type, data } => {
                write!(f, "unknown_action(type={action_type}")?;
                if !data.is_empty() {
                    write!(f, ",data={}", hex_bytes(data))?;
                }
                f.write_str(")")
            }
        }
    }
}

/// Raw bytes as one hex string, every byte kept (leading zeros included).
fn hex_bytes(b: &[u8]) -> String {
    let mut s = String::from("0x");
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// A list of actions, comma-separated.
pub struct ActionList<'a>(pub &'a [Action]);

impl Display for ActionList<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, a) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl Display for Instruction {
    /// One instruction; apply-actions is just its actions, as in OVS's flat action list.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Instruction::GotoTable(t) => write!(f, "goto_table:{t}"),
            Instruction::WriteMetadata { metadata, mask } => {
                write!(f, "write_metadata:{}", c_hex(*metadata))?;
                if *mask != u64::MAX {
                    write!(f, "/{}", c_hex(*mask))?;
                }
                Ok(())
            }
            Instruction::WriteActions(a) => write!(f, "write_actions({})", ActionList(a)),
            Instruction::ApplyActions(a) => write!(f, "{}", ActionList(a)),
            Instruction::ClearActions => f.write_str("clear_actions"),
            Instruction::Meter(m) => write!(f, "meter:{m}"),
            Instruction::Unknown {
                instruction_type,
                data,
            } => {
                write!(f, "unknown_instruction(type={instruction_type}")?;
                if !data.is_empty() {
                    write!(f, ",data={}", hex_bytes(data))?;
                }
                f.write_str(")")
            }
        }
    }
}

/// An instruction list as the value of `actions=`: OVS's canonical order (meter, apply, clear,
/// write-actions, write-metadata, goto-table, whatever the wire order) and `drop` when empty.
pub struct Instructions<'a>(pub &'a [Instruction]);

fn instruction_rank(i: &Instruction) -> u8 {
    match i {
        Instruction::Meter(_) => 0,
        Instruction::ApplyActions(_) => 1,
        Instruction::ClearActions => 2,
        Instruction::WriteActions(_) => 3,
        Instruction::WriteMetadata { .. } => 4,
        Instruction::GotoTable(_) => 5,
        Instruction::Unknown { .. } => 6,
    }
}

impl Display for Instructions<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let mut ins: Vec<&Instruction> = self.0.iter().collect();
        ins.sort_by_key(|i| instruction_rank(i));
        let parts: Vec<String> = ins
            .iter()
            .map(|i| i.to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if parts.is_empty() {
            f.write_str("drop")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Flows.

/// `ofp_print_duration`: seconds, then milliseconds when exact, else as many decimals as needed.
fn duration(sec: u32, nsec: u32) -> String {
    let mut s = sec.to_string();
    if nsec > 0 {
        if nsec.is_multiple_of(1_000_000) {
            let _ = write!(s, ".{:03}", nsec / 1_000_000);
        } else {
            let frac = format!("{nsec:09}");
            s.push('.');
            s.push_str(frac.trim_end_matches('0'));
        }
    }
    s.push('s');
    s
}

/// Flow flags as OVS lists them (each followed by a space, as it prints them).
fn flags_text(flags: u16) -> String {
    let mut s = String::new();
    for (bit, name) in [
        (flow_mod_flags::SEND_FLOW_REM, "send_flow_rem"),
        (flow_mod_flags::CHECK_OVERLAP, "check_overlap"),
        (flow_mod_flags::RESET_COUNTS, "reset_counts"),
        (flow_mod_flags::NO_PKT_COUNTS, "no_packet_counts"),
        (flow_mod_flags::NO_BYT_COUNTS, "no_byte_counts"),
    ] {
        if flags & bit != 0 {
            s.push_str(name);
            s.push(' ');
        }
    }
    let unknown = flags & !0x1f;
    if unknown != 0 {
        let _ = write!(s, "flags={unknown:#x} ");
    }
    s
}

/// `priority=N,MATCH` (priority left out when it is the default), as `match_format` prints.
fn priority_and_match(priority: u16, m: &Match) -> String {
    let mut parts = Vec::new();
    if priority != DEFAULT_PRIORITY {
        parts.push(format!("priority={priority}"));
    }
    parts.extend(m.text_parts());
    parts.join(",")
}

/// One line of `ovs-ofctl dump-flows` for a flow (see [`FlowStats::dump_line`]).
pub struct DumpLine<'a> {
    pub flow: &'a FlowStats,
    /// With counters (plain `dump-flows`) or without (`--no-stats`).
    pub stats: bool,
}

impl FlowStats {
    /// This flow as `ovs-ofctl -O OpenFlow13 --no-names [--no-stats] dump-flows` prints it,
    /// including the leading space.
    pub fn dump_line(&self, stats: bool) -> DumpLine<'_> {
        DumpLine { flow: self, stats }
    }
}

impl Display for DumpLine<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let fs = self.flow;
        f.write_str(" ")?;
        if self.stats || fs.cookie != 0 {
            write!(f, "cookie={:#x}, ", fs.cookie)?;
        }
        if self.stats {
            write!(
                f,
                "duration={}, ",
                duration(fs.duration_sec, fs.duration_nsec)
            )?;
        }
        if self.stats || fs.table_id != 0 {
            write!(f, "table={}, ", fs.table_id)?;
        }
        if self.stats {
            write!(
                f,
                "n_packets={}, n_bytes={}, ",
                fs.packet_count, fs.byte_count
            )?;
        }
        if fs.idle_timeout != 0 {
            write!(f, "idle_timeout={}, ", fs.idle_timeout)?;
        }
        if fs.hard_timeout != 0 {
            write!(f, "hard_timeout={}, ", fs.hard_timeout)?;
        }
        f.write_str(&flags_text(fs.flags))?;
        let m = priority_and_match(fs.priority, &fs.match_);
        if !m.is_empty() {
            write!(f, "{m} ")?;
        }
        write!(f, "actions={}", Instructions(&fs.instructions))
    }
}

impl Display for FlowMod {
    /// The flow mod in `ovs-ofctl add-flow` / `del-flows` syntax: `cookie=..,table=..,
    /// priority=..,MATCH,actions=..`. ADD and MODIFY print their actions; deletes print the
    /// cookie with its mask and `out_port`/`out_group` when set. The command itself is not part
    /// of the syntax (it is the ovs-ofctl verb).
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let is_delete = matches!(
            self.command,
            FlowModCommand::Delete | FlowModCommand::DeleteStrict
        );
        let mut parts: Vec<String> = Vec::new();
        let masked_cookie = matches!(
            self.command,
            FlowModCommand::Modify | FlowModCommand::Delete | FlowModCommand::DeleteStrict
        ) && self.cookie_mask != 0;
        if masked_cookie {
            parts.push(format!("cookie={:#x}/{:#x}", self.cookie, self.cookie_mask));
        } else if self.cookie != 0 || !is_delete {
            parts.push(format!("cookie={:#x}", self.cookie));
        }
        if self.table_id != TABLE_ALL {
            parts.push(format!("table={}", self.table_id));
        }
        // Non-strict deletes ignore the priority; everything else carries it.
        if self.command != FlowModCommand::Delete {
            parts.push(format!("priority={}", self.priority));
        }
        if self.idle_timeout != 0 {
            parts.push(format!("idle_timeout={}", self.idle_timeout));
        }
        if self.hard_timeout != 0 {
            parts.push(format!("hard_timeout={}", self.hard_timeout));
        }
        parts.extend(flags_text(self.flags).split_whitespace().map(str::to_owned));
        if is_delete {
            if self.out_port != port::ANY {
                parts.push(format!("out_port={}", port_name(self.out_port)));
            }
            if self.out_group != GROUP_ANY {
                parts.push(format!("out_group={}", self.out_group));
            }
        }
        parts.extend(self.match_.text_parts());
        if !is_delete {
            parts.push(format!("actions={}", Instructions(&self.instructions)));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_like_inet_ntop() {
        let cases = [
            ("::", "::"),
            ("::1", "::1"),
            ("2001:db8::10", "2001:db8::10"),
            ("::1.2.3.4", "::1.2.3.4"),
            ("::ffff:1.2.3.4", "::ffff:1.2.3.4"),
            ("1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"),
            ("1::", "1::"),
            ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),
            ("fe80::", "fe80::"),
        ];
        for (input, want) in cases {
            let ip: Ipv6Addr = input.parse().unwrap();
            assert_eq!(ipv6(&ip.octets()), want, "{input}");
        }
    }

    #[test]
    fn c_hex_and_ds_hex() {
        assert_eq!(c_hex(0), "0");
        assert_eq!(c_hex(0x10), "0x10");
        assert_eq!(ds_hex(&[0, 0, 0x8, 0x00]), "0x800");
        assert_eq!(ds_hex(&[0, 0]), "0");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(0, 0), "0s");
        assert_eq!(duration(1, 122_000_000), "1.122s");
        assert_eq!(duration(1, 122_500_000), "1.1225s");
    }

    #[test]
    fn cidr() {
        assert_eq!(cidr_bits(&[255, 0, 0, 0]), Some(8));
        assert_eq!(cidr_bits(&[255, 255, 0, 255]), None);
        assert_eq!(cidr_bits(&[255, 255, 255, 255]), Some(32));
        assert_eq!(cidr_bits(&[0xff, 0xfe, 0, 0]), Some(15));
    }
}
