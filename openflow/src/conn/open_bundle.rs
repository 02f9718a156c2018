//! An ONF bundle kept open across several writes.
//!
//! The switch takes each BUNDLE_ADD as it arrives and does most of its work on the message
//! then (Open vSwitch decodes the flow and builds its rule); nothing takes effect before the
//! commit. A caller that learns what to write a piece at a time can so start the switch's
//! work early, and still change its mind before anything is applied: the bundle is ordered,
//! so a later delete of a flow added earlier in it cancels the add.

use super::{
    BundleCtrl, BundleCtrlType, ConnError, Connection, ErrorMsg, Message, Range, Watch,
    bundle_flags, encode_bundle_add, lock, unexpected,
};

/// An open atomic, ordered bundle on one connection: [`OpenBundle::add_each`] as often as
/// needed, then [`OpenBundle::commit`] or [`OpenBundle::discard`]. Dropped without either,
/// the switch discards it on its own (when the connection closes, or once it has been idle
/// for the switch's bundle timeout).
pub struct OpenBundle {
    conn: Connection,
    id: u32,
    flags: u16,
    /// The xids of each add, in order, with the index its first message has among all the
    /// bundle's messages (errors name messages by that index).
    adds: Vec<(Range<u32>, usize)>,
    count: usize,
}

impl Connection {
    /// Open a bundle that later calls fill and commit ([`OpenBundle`]).
    pub async fn open_bundle(&self) -> Result<OpenBundle, ConnError> {
        let id = self
            .inner
            .next_bundle
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let flags = bundle_flags::ATOMIC | bundle_flags::ORDERED;
        let bundle = OpenBundle {
            conn: self.clone(),
            id,
            flags,
            adds: Vec::new(),
            count: 0,
        };
        match bundle.control(BundleCtrlType::OpenRequest).await? {
            Message::BundleControl(c) if c.ctrl_type == BundleCtrlType::OpenReply => Ok(bundle),
            other => Err(unexpected("bundle OPEN_REQUEST", &other)),
        }
    }
}

impl OpenBundle {
    /// Messages added so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was added yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Add `count` messages made one at a time by `message` (`None`: nothing for that
    /// index, which still counts in the indices errors use). Returns once they are written,
    /// without waiting for the switch: what it refuses is reported by the commit.
    pub async fn add_each(
        &mut self,
        count: usize,
        message: impl FnMut(usize) -> Option<Message> + Send,
    ) -> Result<(), ConnError> {
        self.add_with(count, each_made(message)).await
    }

    pub(super) async fn add_with(
        &mut self,
        count: usize,
        mut with: impl FnMut(usize, &mut dyn FnMut(&Message)) + Send,
    ) -> Result<(), ConnError> {
        if count == 0 {
            return Ok(());
        }
        let n = u32::try_from(count).map_err(|_| ConnError::Protocol("bundle too large".into()))?;
        let xids = self.conn.xids(n);
        let (id, flags) = (self.id, self.flags);
        // Encoded in place: the same bytes as BundleAdd::new(..) without cloning the message.
        let mut encode = |i: usize, xid: u32, buf: &mut Vec<u8>| {
            with(i, &mut |m| encode_bundle_add(id, flags, m, xid, buf));
        };
        self.adds.push((xids.clone(), self.count));
        self.count += count;
        self.conn.write_watched(xids, &mut encode).await
    }

    /// Apply everything added, atomically. When the switch refused any message (when it was
    /// added, or at the commit), nothing is applied and [`ConnError::Bundle`] names them by
    /// their index among all the bundle's messages.
    pub async fn commit(mut self) -> Result<(), ConnError> {
        // Errors for the adds arrive before the barrier's reply.
        let barrier = self.conn.barrier().await;
        let add_errors = self.take_errors();
        barrier?;
        if !add_errors.is_empty() {
            let _ = self.control(BundleCtrlType::DiscardRequest).await;
            return Err(ConnError::Bundle {
                control: None,
                messages: add_errors,
            });
        }
        // Errors found at commit time are sent for the failing message's xid before the
        // commit's own error, so the adds are watched again through the commit.
        self.watch_again();
        let commit = self
            .conn
            .request(&self.ctrl(BundleCtrlType::CommitRequest))
            .await;
        let msg_errors = self.take_errors();
        match commit {
            Ok(Message::BundleControl(c)) if c.ctrl_type == BundleCtrlType::CommitReply => {
                if msg_errors.is_empty() {
                    Ok(())
                } else {
                    Err(ConnError::Bundle {
                        control: None,
                        messages: msg_errors,
                    })
                }
            }
            Ok(other) => Err(unexpected("bundle COMMIT_REQUEST", &other)),
            Err(ConnError::Switch(e)) => Err(ConnError::Bundle {
                control: Some(e),
                messages: msg_errors,
            }),
            Err(e) => Err(e),
        }
    }

    /// Drop everything added; nothing of it is applied.
    pub async fn discard(mut self) -> Result<(), ConnError> {
        self.take_errors();
        match self.control(BundleCtrlType::DiscardRequest).await? {
            Message::BundleControl(c) if c.ctrl_type == BundleCtrlType::DiscardReply => Ok(()),
            other => Err(unexpected("bundle DISCARD_REQUEST", &other)),
        }
    }

    fn ctrl(&self, t: BundleCtrlType) -> Message {
        Message::BundleControl(BundleCtrl::new(self.id, t, self.flags))
    }

    /// A control request other than the commit; the switch's error is the bundle's.
    async fn control(&self, t: BundleCtrlType) -> Result<Message, ConnError> {
        self.conn.request(&self.ctrl(t)).await.map_err(|e| match e {
            ConnError::Switch(e) => ConnError::Bundle {
                control: Some(e),
                messages: Vec::new(),
            },
            other => other,
        })
    }

    /// Stop watching the adds; the errors collected for them, by index in the bundle.
    fn take_errors(&mut self) -> Vec<(usize, ErrorMsg)> {
        let mut errors = Vec::new();
        for (xids, first) in &self.adds {
            errors.extend(
                self.conn
                    .take_watch(xids)
                    .into_iter()
                    .map(|(i, e)| (first + i, e)),
            );
        }
        errors
    }

    fn watch_again(&self) {
        let mut s = lock(&self.conn.inner.shared);
        for (xids, _) in &self.adds {
            s.watches.push(Watch {
                xids: xids.clone(),
                errors: Vec::new(),
            });
        }
    }
}

/// `message`'s messages as [`OpenBundle::add_with`] takes them: an index made `None` adds
/// nothing.
pub(super) fn each_made(
    mut message: impl FnMut(usize) -> Option<Message> + Send,
) -> impl FnMut(usize, &mut dyn FnMut(&Message)) + Send {
    move |i, add| {
        if let Some(m) = message(i) {
            add(&m);
        }
    }
}

impl Drop for OpenBundle {
    fn drop(&mut self) {
        // Watches left behind would only grow the table.
        self.take_errors();
    }
}
