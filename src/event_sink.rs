//! Says the statements of [`vipflow_core::events`] as Kubernetes Events: a token bucket caps
//! the rate across all Services (`queue`), a sink keeps what is due and what was said (`sink`),
//! and the writer creates, updates and reads back the Events through the API (`writer`).

mod queue;
mod sink;
mod writer;

pub(crate) use queue::Bucket;
pub use sink::{EventCounters, EventSink, SinkConfig, SinkKind};
pub(crate) use writer::{CONTROLLER, NOTE_MAX, nonce, truncate};
pub use writer::{EventsError, event_object, said_by, statement_of};

#[cfg(test)]
#[path = "event_sink_tests.rs"]
mod tests;
