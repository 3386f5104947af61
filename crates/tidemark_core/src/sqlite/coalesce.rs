//! Coalesced log appends: a commit's WAL frames reach the kernel in one `write` instead of two
//! per frame.
//!
//! Why: SQLite writes each WAL frame with two calls, its 24-byte header and then its page, so a
//! frame of 4,120 bytes straddles two page-cache pages and makes three per-page passes through
//! the file system. At 10,000 SENDs/s that was a third of the hot writer's CPU (issue 2,
//! session 17, `perf` of `tiered` at 10k: `pwrite64` 11 % of the whole server's samples, the
//! writer 33 %), on the one thread every SEND waits on.
//!
//! What: a [`LogBuffer`] holds one contiguous run of writes to a file. A write that continues
//! the run is appended; any other write sends the run first and starts a new one, so the file
//! receives the same bytes at the same offsets in the same order, only in fewer calls. The run
//! is sent when it reaches [`COALESCE_BYTES`] and before anything that must see the file as
//! written: a sync, a read of a buffered range, a size query, a truncation, a file control, the
//! close, and before the connection releases the WAL write lock. The caller
//! ([`super::writeback`]) keeps this for WAL files of connections that sync every commit
//! (`synchronous = FULL`, which [`super::open_rw_with`] sets): every committed frame was then
//! synced — so sent — before SQLite publishes it in the WAL index, and other connections only
//! ever read published frames. What sits in the buffer belongs to the open transaction (or to
//! one rolled back, sent before the lock goes), so losing it (a crash, a failed send) loses
//! only what SQLite had not committed. Not for a log SQLite pads (see
//! [`super::writeback`]'s `link_log`).

/// Most bytes a [`LogBuffer`] holds before it sends them (one [`super::WRITEBACK_CHUNK`], so
/// a paced file is still written in steps of that size).
pub const COALESCE_BYTES: usize = super::WRITEBACK_CHUNK as usize;

/// One contiguous run of buffered writes: `data` goes at file offset `start`.
#[derive(Debug, Default)]
pub(super) struct LogBuffer {
    start: u64,
    data: Vec<u8>,
}

impl LogBuffer {
    /// Buffers `bytes` for file offset `offset`; `send` writes a run to the file (and reports
    /// its error, if any). A write that does not continue the run sends the run first; a full
    /// run is sent at once.
    pub(super) fn write<E>(
        &mut self,
        bytes: &[u8],
        offset: u64,
        mut send: impl FnMut(&[u8], u64) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.data.is_empty() && offset != self.end() {
            self.flush(&mut send)?;
        }
        if self.data.is_empty() {
            self.start = offset;
        }
        self.data.extend_from_slice(bytes);
        if self.data.len() >= COALESCE_BYTES {
            self.flush(send)?;
        }
        Ok(())
    }

    /// Sends the run, if any. The buffer is empty afterwards even if `send` failed: the run
    /// belonged to a transaction that now fails (see the module docs).
    pub(super) fn flush<E>(
        &mut self,
        mut send: impl FnMut(&[u8], u64) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.data.is_empty() {
            return Ok(());
        }
        let outcome = send(&self.data, self.start);
        self.data.clear();
        if self.data.capacity() > 4 * COALESCE_BYTES {
            self.data.shrink_to(COALESCE_BYTES);
        }
        outcome
    }

    /// Whether any of `len` bytes at `offset` is buffered (a read of them must see them).
    pub(super) fn overlaps(&self, offset: u64, len: u64) -> bool {
        !self.data.is_empty() && offset < self.end() && offset.saturating_add(len) > self.start
    }

    fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file as a byte vector, and the writes it received.
    #[derive(Default)]
    struct File {
        bytes: Vec<u8>,
        writes: Vec<(u64, usize)>,
    }

    impl File {
        fn send(&mut self, data: &[u8], offset: u64) -> Result<(), ()> {
            let at = offset as usize;
            if self.bytes.len() < at + data.len() {
                self.bytes.resize(at + data.len(), 0);
            }
            self.bytes[at..at + data.len()].copy_from_slice(data);
            self.writes.push((offset, data.len()));
            Ok(())
        }
    }

    #[test]
    fn frames_written_in_order_go_out_as_one_write() {
        let (mut file, mut buf) = (File::default(), LogBuffer::default());
        let mut offset = 32;
        for frame in 0..5u8 {
            let header = [frame; 24];
            let page = [frame + 100; 4096];
            buf.write(&header, offset, |d, o| file.send(d, o)).unwrap();
            buf.write(&page, offset + 24, |d, o| file.send(d, o))
                .unwrap();
            offset += 24 + 4096;
        }
        assert!(file.writes.is_empty(), "nothing sent before the flush");
        buf.flush(|d, o| file.send(d, o)).unwrap();
        assert_eq!(file.writes, vec![(32, 5 * 4120)]);
        assert_eq!(file.bytes[32 + 4120], 1, "frame 1's header");
        assert_eq!(file.bytes[32 + 4120 + 24], 101, "frame 1's page");
        buf.flush(|d, o| file.send(d, o)).unwrap();
        assert_eq!(file.writes.len(), 1, "an empty buffer sends nothing");
    }

    #[test]
    fn a_write_elsewhere_sends_the_run_first_and_keeps_the_order() {
        let (mut file, mut buf) = (File::default(), LogBuffer::default());
        buf.write(&[1; 100], 0, |d, o| file.send(d, o)).unwrap();
        // A frame rewritten in place (SQLite does so within a transaction): the run goes out
        // first, so the later bytes land over it.
        buf.write(&[2; 10], 50, |d, o| file.send(d, o)).unwrap();
        assert_eq!(file.writes, vec![(0, 100)]);
        buf.write(&[3; 10], 60, |d, o| file.send(d, o)).unwrap();
        buf.flush(|d, o| file.send(d, o)).unwrap();
        assert_eq!(file.writes, vec![(0, 100), (50, 20)]);
        assert_eq!(
            &file.bytes[45..75],
            &[&[1u8; 5][..], &[2; 10], &[3; 10], &[1; 5]].concat()[..]
        );
    }

    #[test]
    fn a_full_run_is_sent_at_once() {
        let (mut file, mut buf) = (File::default(), LogBuffer::default());
        let page = vec![9u8; 4096];
        for i in 0..(COALESCE_BYTES / 4096) as u64 {
            buf.write(&page, i * 4096, |d, o| file.send(d, o)).unwrap();
        }
        assert_eq!(file.writes, vec![(0, COALESCE_BYTES)]);
        assert!(!buf.overlaps(0, u64::MAX), "empty after the send");
    }

    #[test]
    fn overlaps_is_exactly_the_buffered_range() {
        let mut buf = LogBuffer::default();
        assert!(!buf.overlaps(0, 100));
        buf.write(&[0; 100], 1000, |_, _| Ok::<(), ()>(())).unwrap();
        assert!(buf.overlaps(1000, 1));
        assert!(buf.overlaps(1099, 1));
        assert!(buf.overlaps(900, 101));
        assert!(!buf.overlaps(900, 100));
        assert!(!buf.overlaps(1100, 50));
    }

    #[test]
    fn a_failed_send_empties_the_buffer_and_reports_the_error() {
        let mut buf = LogBuffer::default();
        buf.write(&[0; 100], 0, |_, _| Ok::<(), &str>(())).unwrap();
        assert_eq!(buf.flush(|_, _| Err("disk full")), Err("disk full"));
        assert!(!buf.overlaps(0, 100));
        let mut sent = Vec::new();
        buf.write(&[1; 10], 500, |_, o| {
            sent.push(o);
            Ok::<(), ()>(())
        })
        .unwrap();
        buf.flush(|_, o| {
            sent.push(o);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(sent, vec![500], "the failed run is not sent again");
    }
}
