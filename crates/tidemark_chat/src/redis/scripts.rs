//! The Lua scripts of the Redis hot store (`scripts/*.lua`, each prefixed with
//! `scripts/prelude.lua`). They are loaded once at start (`SCRIPT LOAD`) and called by SHA1
//! (`EVALSHA`); after a server restart lost the script cache, `redis::Script` reloads on
//! `NOSCRIPT` and retries.

use redis::Script;

const PRELUDE: &str = include_str!("scripts/prelude.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Every script, compiled into the binary.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) create_conversation: Script,
    pub(crate) reserve: Script,
    pub(crate) mark_committed: Script,
    pub(crate) trim: Script,
    pub(crate) purge_dedup: Script,
    pub(crate) queued_records: Script,
    pub(crate) hot_slice: Script,
    pub(crate) hot_unread: Script,
    pub(crate) raise: Script,
    pub(crate) lower: Script,
    pub(crate) register_trim: Script,
    pub(crate) raise_clock_floor: Script,
    pub(crate) archivable_page: Script,
    pub(crate) lease: Script,
    pub(crate) release_lease: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            create_conversation: script(include_str!("scripts/create_conversation.lua")),
            reserve: script(include_str!("scripts/reserve_and_record.lua")),
            mark_committed: script(include_str!("scripts/mark_published_and_committed.lua")),
            trim: script(include_str!("scripts/trim.lua")),
            purge_dedup: script(include_str!("scripts/purge_dedup.lua")),
            queued_records: script(include_str!("scripts/queued_records.lua")),
            hot_slice: script(include_str!("scripts/hot_slice.lua")),
            hot_unread: script(include_str!("scripts/hot_unread.lua")),
            raise: script(include_str!("scripts/raise.lua")),
            lower: script(include_str!("scripts/lower.lua")),
            register_trim: script(include_str!("scripts/register_trim.lua")),
            raise_clock_floor: script(include_str!("scripts/raise_clock_floor.lua")),
            archivable_page: script(include_str!("scripts/archivable_page.lua")),
            lease: script(include_str!("scripts/lease.lua")),
            release_lease: script(include_str!("scripts/release_lease.lua")),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 15] {
        [
            &self.create_conversation,
            &self.reserve,
            &self.mark_committed,
            &self.trim,
            &self.purge_dedup,
            &self.queued_records,
            &self.hot_slice,
            &self.hot_unread,
            &self.raise,
            &self.lower,
            &self.register_trim,
            &self.raise_clock_floor,
            &self.archivable_page,
            &self.lease,
            &self.release_lease,
        ]
    }
}
