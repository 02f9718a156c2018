//! The model's rules, one topic a file; their fixtures in `test_support`.

use super::*;

mod conflicts;
mod invalid;
mod slices;
mod test_support;
mod vips;
