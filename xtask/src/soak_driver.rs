//! The soak load generator lives in `kiln_testkit::soak`, shared with the server's soak
//! test; `bench soak` reaches it through this name.

pub use kiln_testkit::soak::*;
