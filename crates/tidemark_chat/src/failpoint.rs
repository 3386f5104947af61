//! Test failpoints in the commit path, for crash tests of the real binary.
//!
//! Off unless the process was started with `TEST_FAILPOINT_DIR=<dir>` (read once; in production
//! the check is one load of an initialised `OnceLock`). A failpoint `name` is active while the
//! file `<dir>/<name>` exists, so a test can switch it on and off while the server runs.
//!
//! Failpoints: `after-reserve` — a fresh staged SEND stops for good between step 1 (reserve)
//! and step 2 (outbox append), the window seed 000's recovery worker exists for.

use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("TEST_FAILPOINT_DIR").map(PathBuf::from))
        .as_ref()
}

/// Whether the failpoint `name` is switched on.
pub fn active(name: &str) -> bool {
    dir().is_some_and(|d| d.join(name).exists())
}
