//! The physical limit of durable commits on the data disk: 4 KiB writes, each followed by
//! `fdatasync`, in one thread, for a fixed time. The writes cycle over a preallocated 1 MiB
//! region, as SQLite reuses its WAL file after a checkpoint (appending, which also changes
//! the file size and so journals metadata, is slower on ext4).

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// What the disk did.
#[derive(Debug, Clone)]
pub(super) struct FsyncResult {
    /// fdatasync calls completed.
    pub(super) count: u64,
    /// Wall time of the loop.
    pub(super) elapsed: Duration,
    /// Latency of one write + fdatasync, in µs.
    pub(super) hist: Histogram<u64>,
}

impl FsyncResult {
    /// fdatasync calls per second.
    pub(super) fn per_sec(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64()
    }
}

/// Blocks of the region the probe cycles over.
const REGION_BLOCKS: u64 = 256;

/// Writes 4 KiB + `fdatasync` in a loop for `duration` in a file created in `dir` (removed
/// afterwards). Blocking: call it from a blocking thread.
pub(super) fn measure(dir: &Path, duration: Duration) -> anyhow::Result<FsyncResult> {
    let file = tempfile::Builder::new()
        .prefix("fsync-probe-")
        .tempfile_in(dir)?;
    let mut f = file.as_file();
    let block = [0x5au8; 4096];
    for _ in 0..REGION_BLOCKS {
        f.write_all(&block)?;
    }
    f.sync_all()?;
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut count = 0u64;
    let start = Instant::now();
    while start.elapsed() < duration {
        let t = Instant::now();
        if count.is_multiple_of(REGION_BLOCKS) {
            f.seek(SeekFrom::Start(0))?;
        }
        f.write_all(&block)?;
        f.sync_data()?;
        hist.saturating_record(t.elapsed().as_micros() as u64);
        count += 1;
    }
    Ok(FsyncResult {
        count,
        elapsed: start.elapsed(),
        hist,
    })
}
