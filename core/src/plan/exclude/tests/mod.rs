//! excludeIps' readers and plans, one topic a file; their helpers in `test_support`.

use super::*;

mod parse;
mod plan;
mod pool_plan;
mod test_support;
