//! The status document's VIPs: made from the planner's report as they are read or written,
//! so an agent keeps no document per VIP between `/status` requests, or as `vipflow status`
//! read them back.

use super::{PortDoc, VipDoc};
use crate::model::ServiceKey;
use crate::plan::service_report::ServiceReport;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// Every won VIP with its ports and Services, in VIP order: each VIP's ports by Service (by
/// key), then by port, as a model of the same objects lists them; its Services sorted.
#[derive(Clone, Default)]
pub struct VipList {
    from: VipListSource,
    /// How many VIPs: counted once, it is a metric read after every plan.
    len: usize,
}

#[derive(Clone, Default)]
enum VipListSource {
    #[default]
    Nothing,
    /// The planner's claims, shared with it (a persistent map: this copy is a count).
    Report(ServiceReport),
    /// As read back from a document.
    Docs(Arc<Vec<VipDoc>>),
}

impl VipList {
    /// The VIPs `report` says are won.
    pub fn of(report: ServiceReport) -> VipList {
        let mut len = 0;
        let mut last = None;
        for (c, _) in report.won() {
            if last != Some(c.0) {
                len += 1;
                last = Some(c.0);
            }
        }
        VipList {
            from: VipListSource::Report(report),
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Each VIP's document, made as it is taken.
    pub fn iter(&self) -> Box<dyn Iterator<Item = VipDoc> + '_> {
        match &self.from {
            VipListSource::Nothing => Box::new(std::iter::empty()),
            VipListSource::Docs(d) => Box::new(d.iter().cloned()),
            VipListSource::Report(r) => {
                let mut won = r.won().peekable();
                Box::new(std::iter::from_fn(move || {
                    let (first, k) = won.next()?;
                    let vip = first.0;
                    let mut group = vec![(k, PortDoc::of(first))];
                    while let Some((c, k)) = won.next_if(|(c, _)| c.0 == vip) {
                        group.push((k, PortDoc::of(c)));
                    }
                    Some(doc(vip, group))
                }))
            }
        }
    }

    /// The Services that won `vip`, sorted, each once.
    pub fn services_of(&self, vip: IpAddr) -> Vec<ServiceKey> {
        match &self.from {
            VipListSource::Nothing => Vec::new(),
            VipListSource::Docs(d) => d
                .binary_search_by(|x| x.vip.cmp(&vip))
                .map_or_else(|_| Vec::new(), |i| d[i].services.clone()),
            VipListSource::Report(r) => {
                let mut out: Vec<ServiceKey> = r
                    .claims_of(vip)
                    .filter_map(|(_, set)| Some(set.first()?.2.clone()))
                    .collect();
                out.sort_unstable();
                out.dedup();
                out
            }
        }
    }
}

/// One VIP's document from its won claims (in claim order) and their winners.
fn doc(vip: IpAddr, mut group: Vec<(&ServiceKey, PortDoc)>) -> VipDoc {
    group.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut services: Vec<ServiceKey> = Vec::new();
    for (k, _) in &group {
        if services.last() != Some(*k) {
            services.push((*k).clone());
        }
    }
    VipDoc {
        vip,
        services,
        ports: group.into_iter().map(|(_, p)| p).collect(),
    }
}

impl From<Vec<VipDoc>> for VipList {
    fn from(docs: Vec<VipDoc>) -> VipList {
        VipList {
            len: docs.len(),
            from: VipListSource::Docs(Arc::new(docs)),
        }
    }
}

impl PartialEq for VipList {
    fn eq(&self, other: &VipList) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for VipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for VipList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for VipList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<VipList, D::Error> {
        Vec::<VipDoc>::deserialize(d).map(VipList::from)
    }
}
