//! When a polled file must be read again: its stamp (size, modification time, inode), and when
//! a stamp can be trusted to stand for the content last read.

use std::path::Path;
use std::time::{Duration, SystemTime};

/// What identifies a file version without reading it: a file whose stamp has not changed
/// since its content was last verified (read or hashed) well after its modification time is
/// not read again (a bad 200 MB file is not re-read every poll). Before that the stamp is not
/// trusted: a rewrite of the same size within one timestamp tick would look the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// How long after a stamp's modification time its content must have been verified for the
/// stamp to be trusted, on a file system that keeps coarse times (whole seconds, or two for
/// FAT): past the longest such tick.
const STAMP_TRUSTED_AFTER: Duration = Duration::from_secs(2);

/// The same, on a file system that keeps fine times (a modification time with a fraction of a
/// second): past the kernel's coarse clock tick (at most 10 ms), with room to spare. A write
/// that starts after the content was verified then always moves the time on.
const FINE_STAMP_TRUSTED_AFTER: Duration = Duration::from_millis(50);

impl Stamp {
    pub(super) fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            len: m.len(),
            modified: m.modified().ok(),
            inode: m.ino(),
        })
    }

    /// Whether what a read found, when it began at `verified` (before this stamp was taken),
    /// stands for every file with this stamp: a write after `verified` would have moved the
    /// modification time past this one, since it is at least one clock tick behind.
    pub(super) fn trusted(&self, verified: Option<SystemTime>) -> bool {
        let Some(modified) = self.modified else {
            return false;
        };
        let fine = modified
            .duration_since(SystemTime::UNIX_EPOCH)
            .is_ok_and(|d| d.subsec_nanos() != 0);
        let after = if fine {
            FINE_STAMP_TRUSTED_AFTER
        } else {
            STAMP_TRUSTED_AFTER
        };
        verified
            .and_then(|v| v.duration_since(modified).ok())
            .is_some_and(|d| d >= after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(modified: SystemTime) -> Stamp {
        Stamp {
            len: 10,
            modified: Some(modified),
            inode: 1,
        }
    }

    #[test]
    fn a_fine_time_is_trusted_once_verified_past_the_clock_tick() {
        let m = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let s = stamp(m);
        assert!(!s.trusted(None), "never verified");
        assert!(!s.trusted(Some(m)), "verified in the same tick");
        assert!(
            !s.trusted(Some(m - Duration::from_secs(1))),
            "verified before"
        );
        assert!(!s.trusted(Some(m + Duration::from_millis(49))));
        assert!(s.trusted(Some(m + FINE_STAMP_TRUSTED_AFTER)));
    }

    #[test]
    fn a_whole_second_time_is_trusted_only_after_two_seconds() {
        // FAT keeps two seconds, others one: a same-size rewrite within them looks the same.
        let m = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = stamp(m);
        assert!(!s.trusted(Some(m + Duration::from_millis(1999))));
        assert!(s.trusted(Some(m + STAMP_TRUSTED_AFTER)));
        let unknown = Stamp {
            modified: None,
            ..s
        };
        assert!(
            !unknown.trusted(Some(m + Duration::from_secs(60))),
            "no time: never"
        );
    }

    /// The hazard the rule guards: the same file rewritten in place, the same size, right after
    /// the watcher read it (within one tick of the clock the time comes from, the stamp is the
    /// same). The new content is still taken.
    #[tokio::test]
    async fn a_same_size_rewrite_in_place_right_after_a_read_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.yaml");
        let text = |vip: &str| {
            format!(
                "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: shop}}\nspec: {{externalIPs: [{vip}], ports: [{{port: 80}}]}}\n"
            )
        };
        // Both versions get one time, a little ahead (as from a clock a little fast), so
        // that however slow the machine, the rewrite lands before the stamp could be trusted.
        let modified = SystemTime::now() + Duration::from_secs(5);
        let set_time = || {
            let f = std::fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(modified).unwrap();
        };
        std::fs::write(&path, text("192.0.2.11")).unwrap();
        set_time();
        let (mut rx, task) =
            crate::source::file::watch(path.clone(), Duration::from_millis(10)).unwrap();
        std::fs::write(&path, text("192.0.2.12")).unwrap();
        set_time();
        tokio::time::timeout(Duration::from_secs(10), rx.changed())
            .await
            .expect("the rewrite is picked up")
            .unwrap();
        let spec = rx.borrow().objects.services[0].spec.clone();
        let ips = spec.and_then(|s| s.external_ips);
        assert_eq!(ips, Some(vec![crate::model::Text::from("192.0.2.12")]));
        task.abort();
    }
}
