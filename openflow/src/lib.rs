//! OpenFlow 1.3.
