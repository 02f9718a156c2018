//! What was wrong in the input, typed: what it is about ([`Subject`]) and what kind of
//! problem it is ([`ProblemKind`]), so that Events and status match on kinds, never on the
//! wording of a message.

use super::ServiceKey;
use std::cmp::Ordering;
use std::fmt;

/// Something in the input that was skipped or ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub subject: Subject,
    /// The VIP (or VIP:port/proto) concerned, if any.
    pub vip: Option<String>,
    pub kind: ProblemKind,
    /// What is wrong, for people.
    pub reason: String,
}

/// What a [`Problem`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    Service(ServiceKey),
    EndpointSlice {
        namespace: String,
        name: String,
    },
    Node(String),
    /// An object of this kind that has no name.
    Unnamed(&'static str),
    /// An item of an objects file, as `Kind namespace/name` or `Kind name`, or the file's List.
    FileItem(String),
    /// A named MetalLB object, by its reference: what its Events go on. Boxed: a problem is
    /// passed by value, and most are about something else.
    Object(Box<ObjectRef>),
}

/// A Kubernetes object as an Event's `regarding` names it: the apiVersion it was read in, its
/// kind, namespace (none: cluster-scoped), name and, when known, uid (`kubectl describe` finds
/// an object's Events by it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Option<String>,
}

/// What kind of problem it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// A VIP:port/protocol an older Service claimed first: this Service does not get it.
    ConflictLost,
    /// An object listed twice: the first is used.
    Duplicate,
    /// An object, or a part of it (an address, a port, a VIP), that cannot be used: skipped.
    Invalid,
    /// A field vipflow does not know: ignored, the object is still used.
    UnknownField,
    /// A field vipflow knows and does not carry out (MetalLB's, mostly): said, and the object
    /// used without it.
    Unsupported,
    /// An object vipflow does not carry out as written (MetalLB's): a field it does not carry
    /// out where using the object without it would do otherwise than asked, or a kind it does
    /// not read. Said, and the object skipped.
    UnsupportedObject,
}

impl ProblemKind {
    /// What became of the thing it is about, as `vipflow plan` heads the line: `skipped`
    /// (not used), `ignored` (an unknown field; the object is used), `not supported` (a field
    /// or an object vipflow does not carry out; the reason says whether the object is used).
    pub fn outcome(self) -> &'static str {
        match self {
            ProblemKind::ConflictLost | ProblemKind::Duplicate | ProblemKind::Invalid => "skipped",
            ProblemKind::UnknownField => "ignored",
            ProblemKind::Unsupported | ProblemKind::UnsupportedObject => "not supported",
        }
    }
}

impl Problem {
    pub fn new(subject: Subject, kind: ProblemKind, reason: impl Into<String>) -> Problem {
        Problem {
            subject,
            vip: None,
            kind,
            reason: reason.into(),
        }
    }

    pub fn with_vip(mut self, vip: Option<String>) -> Problem {
        self.vip = vip;
        self
    }

    /// The Service it is about, if it is about one.
    pub fn service(&self) -> Option<&ServiceKey> {
        match &self.subject {
            Subject::Service(k) => Some(k),
            _ => None,
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Service(k) => write!(f, "Service {k}"),
            Subject::EndpointSlice { namespace, name } => {
                write!(f, "EndpointSlice {namespace}/{name}")
            }
            Subject::Node(n) => write!(f, "Node {n}"),
            Subject::Unnamed(kind) => f.write_str(kind),
            Subject::FileItem(what) => f.write_str(what),
            Subject::Object(o) => write!(f, "{o}"),
        }
    }
}

/// `Kind namespace/name`, or `Kind name`: as an objects file's items are named.
impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.vip {
            Some(v) => write!(f, "{}: {}: {}", self.subject, v, self.reason),
            None => write!(f, "{}: {}", self.subject, self.reason),
        }
    }
}

/// In the order people read them: by what they are about as written, then VIP, then reason.
impl Ord for Problem {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.subject.to_string(), &self.vip, &self.reason, self.kind).cmp(&(
            other.subject.to_string(),
            &other.vip,
            &other.reason,
            other.kind,
        ))
    }
}

impl PartialOrd for Problem {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_what_became_of_its_object() {
        for (kind, outcome) in [
            (ProblemKind::ConflictLost, "skipped"),
            (ProblemKind::Duplicate, "skipped"),
            (ProblemKind::Invalid, "skipped"),
            (ProblemKind::UnknownField, "ignored"),
            (ProblemKind::Unsupported, "not supported"),
            (ProblemKind::UnsupportedObject, "not supported"),
        ] {
            assert_eq!(kind.outcome(), outcome, "{kind:?}");
        }
    }
}
