//! Scenario tests for the flow plan (the flows on br-ex). Fixtures are `kubectl get
//! -o yaml` shaped text, parsed by the file source and built into a model.

use super::*;

mod announce;
mod bypass_and_gateway;
mod support;
mod text_and_mac;
mod underlay_and_ids;
