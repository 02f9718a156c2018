//! What the switch's flow monitor reported about vipflow's flows, and the writes that put
//! them back, without reading the table.

use super::applied::Applied;
use super::state::{FlowBody, FlowId, FlowSet, diff};
use openflow::Message;
use openflow::monitor::{FlowEvent, FlowUpdate, MonitorEvent};
use std::collections::BTreeMap;

/// What the flow monitor reported since vipflow's flows were last made right.
#[derive(Debug, Default)]
pub struct Heard {
    /// Per slot, the last state reported: `None` deleted, `Some(cookie)` there, with content
    /// vipflow did not write.
    slots: BTreeMap<FlowId, Option<u64>>,
    /// Updates were lost (a pause, an unreadable one): only a read-back tells what is there.
    pub lost: bool,
}

impl Heard {
    /// Note what a flow monitor message says about the flows in `applied` and those carrying
    /// vipflow's cookie: a change in one of vipflow's (table, priority, match) slots
    /// (deleted, modified, or taken by someone else's flow), a flow with its cookie that it
    /// did not write, or updates lost (resumed after a pause, unreadable). Returns whether
    /// there is something to check.
    pub fn note(
        &mut self,
        ev: Result<MonitorEvent, openflow::DecodeError>,
        applied: &Applied,
        cookie_base: u64,
        cookie_mask: u64,
    ) -> bool {
        match ev {
            Ok(MonitorEvent::Updates(updates)) => {
                let mut any = false;
                for u in updates {
                    // Abbreviated entries are this connection's own writes.
                    let FlowUpdate::Full {
                        event,
                        table_id,
                        priority,
                        cookie,
                        match_,
                        ..
                    } = u
                    else {
                        continue;
                    };
                    let id = (table_id, priority, match_.normalized());
                    if cookie & cookie_mask != cookie_base && applied.at(&id).is_none() {
                        continue;
                    }
                    let now = (event != FlowEvent::Deleted).then_some(cookie);
                    self.slots.insert(id, now);
                    any = true;
                }
                any
            }
            Ok(MonitorEvent::Paused) => false,
            Ok(MonitorEvent::Resumed) | Err(_) => {
                self.lost = true;
                true
            }
        }
    }

    /// The writes that put back what was heard of: each slot gets vipflow's flow again (a
    /// flow changed without its actions reported cannot be told from an unchanged one, and
    /// writing it again is harmless), and a flow with vipflow's cookie that it did not write
    /// is deleted.
    pub fn repair(self, applied: &Applied) -> Vec<Message> {
        let (mut live, mut want) = (FlowSet::new(), FlowSet::new());
        for (id, now) in self.slots {
            if let Some((_, ours)) = applied.at(&id) {
                want.insert(id.clone(), ours);
            }
            if let Some(cookie) = now {
                live.insert(
                    id,
                    FlowBody {
                        cookie,
                        instructions: Vec::new(),
                    },
                );
            }
        }
        diff(&live, &want)
    }
}
