//! OVSDB (RFC 7047) client. Filled in by the OVSDB issue.
