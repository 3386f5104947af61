//! SQLite's own page cache with one walk taken out of every commit.
//!
//! What it costs without this: at the end of each write transaction SQLite drops every cached
//! page past the file's end (`pager_end_transaction` → `pcache1Truncate`). That is free unless
//! the cache has held a page number past the end since its last truncation, and then it walks
//! every hash slot and every cached page (`pcache1TruncateUnsafe`, SQLite 3.50). B-tree balance
//! makes that so on most commits of a randomly filled index: to put the pages it rebalances in
//! page-number order it swaps two of them through a spare number, the lock-byte page
//! (`PENDING_BYTE / page_size + 1`: page 1,048,577 of `hot.db`'s 1 KiB pages), which is never a
//! real page, and the swap is undone in the same call. So every commit after such a balance
//! walked the whole cache while the file was under 1 GiB. In a `perf` profile of `bench chat`
//! `tiered` at 5,000 sends/s on tmpfs that walk was the largest single function of the server:
//! 4.85 % of all the machine's samples, a fifth of the hot writer's (issue 2, session 24;
//! [`super::cache`] keeps a small file's cache small for the same reason).
//!
//! How: every page cache is SQLite's default one (got with `SQLITE_CONFIG_GETPCACHE2`) wrapped,
//! each call passed through; the wrapper keeps a [`Bound`] of the page numbers its cache may
//! hold and passes a truncation on only when a page at or past its limit may be cached.
//! Installed once per process, by `main` before SQLite initializes ([`install`]); a process
//! that does not, keeps SQLite's cache as it is (correct, only slower) and [`installed`] says so.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rusqlite::ffi;

/// SQLite's lock byte (`PENDING_BYTE`, 1 GiB).
const PENDING_BYTE: u32 = 0x4000_0000;

/// Which page numbers a cache may hold, as far as truncation needs to know: an upper bound of
/// every page number that entered the cache (fetched, or given by a renumbering) since the last
/// truncation that reached it, and how many pages sit at the spare number B-tree balance swaps
/// through ([`Bound::spare`]), which does not raise the bound because balance gives it back
/// before it returns.
///
/// Safe by construction: it only ever errs towards "may hold" (a page dropped by the cache
/// itself, or one that stays at the spare number, leaves the bound where it was until the next
/// truncation that is passed on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    /// The spare page number of the cache's page size.
    spare: u32,
    /// No page number above this is cached, except at `spare`.
    max_key: u32,
    /// Pages renumbered to `spare` and not away from it since.
    at_spare: u32,
    /// A page went to `spare` since the last truncation passed on: SQLite's own cache, whose
    /// largest key then stays at `spare`, would walk itself whole at every truncation.
    swapped: bool,
}

impl Bound {
    /// The bound of a new, empty cache of pages of `page_size` bytes.
    pub fn new(page_size: u32) -> Self {
        Self {
            spare: PENDING_BYTE / page_size.max(1) + 1,
            max_key: 0,
            at_spare: 0,
            swapped: false,
        }
    }

    /// The spare page number balance swaps through (`PENDING_BYTE / page_size + 1`).
    pub fn spare(&self) -> u32 {
        self.spare
    }

    /// Page `key` is in the cache (fetched or created).
    pub fn fetched(&mut self, key: u32) {
        self.max_key = self.max_key.max(key);
    }

    /// A cached page was renumbered from `old` to `new`.
    pub fn rekeyed(&mut self, old: u32, new: u32) {
        if old == self.spare {
            self.at_spare = self.at_spare.saturating_sub(1);
        }
        if new == self.spare {
            self.at_spare = self.at_spare.saturating_add(1);
            self.swapped = true;
        } else {
            self.max_key = self.max_key.max(new);
        }
    }

    /// Whether a truncation to `limit` (drop every page numbered `limit` or more) may find a
    /// page to drop.
    pub fn may_hold_from(&self, limit: u32) -> bool {
        self.max_key >= limit || (self.at_spare > 0 && self.spare >= limit)
    }

    /// Whether SQLite's own cache would walk itself whole at a truncation to `limit` now: a
    /// page went to the spare number since the last truncation passed on, and the spare number
    /// is at or past `limit` (a file past the lock byte has no walk to save).
    pub fn would_walk(&self, limit: u32) -> bool {
        self.swapped && self.spare >= limit
    }

    /// The cache dropped every page numbered `limit` or more.
    pub fn truncated(&mut self, limit: u32) {
        self.max_key = self.max_key.min(limit.saturating_sub(1));
        if self.spare >= limit {
            self.at_spare = 0;
        }
        // SQLite's own cache is back to its largest key below `limit`.
        self.swapped = false;
    }
}

/// SQLite's default page cache, wrapped by every cache made after [`install`].
struct Base(ffi::sqlite3_pcache_methods2);

// SAFETY: the methods are plain C function pointers and the default cache's `pArg`, which
// SQLite itself shares among all threads.
unsafe impl Send for Base {}
// SAFETY: as above; the struct is never written after it is set.
unsafe impl Sync for Base {}

static BASE: OnceLock<Base> = OnceLock::new();

/// Set once SQLite took the wrapped methods.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Truncations not passed on at which SQLite's own cache would have walked itself whole.
static WALKS_SAVED: AtomicU64 = AtomicU64::new(0);

/// Whether this process's page caches are the wrapped ones (see the module docs).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// How many walks of a whole cache the wrapper saved in this process so far: truncations it did
/// not pass on, after a balance's swap through the spare page (see the module docs).
pub fn walks_saved() -> u64 {
    WALKS_SAVED.load(Ordering::Relaxed)
}

/// One cache: the default one's, and its [`Bound`].
struct Wrapped {
    inner: *mut ffi::sqlite3_pcache,
    bound: Bound,
}

fn base() -> &'static ffi::sqlite3_pcache_methods2 {
    // Only installed once BASE is set.
    &BASE.get().expect("the wrapped page cache is installed").0
}

/// # Safety
/// `p` is a cache made by [`x_create`] and not destroyed; SQLite calls a cache's methods from one
/// thread at a time (its pager's).
unsafe fn wrapped<'a>(p: *mut ffi::sqlite3_pcache) -> &'a mut Wrapped {
    // SAFETY: as the function's contract says.
    unsafe { &mut *p.cast::<Wrapped>() }
}

/// Wraps SQLite's default page cache for every cache made from now on (see the module docs).
///
/// Call it once, first thing in `main`, before any thread or connection exists: SQLite takes a
/// page cache only before it initializes (its first connection of any kind, or VFS lookup),
/// and `sqlite3_config` is not thread-safe, so a call racing another thread's first connection
/// could hand SQLite's own caches to the wrapper. Hence no open path calls it lazily; a process
/// that does not call it (the libraries' tests) keeps SQLite's own cache: correct, only slower.
///
/// # Errors
/// SQLite's code when it refuses the configuration (it was initialized already), or a message
/// if its default cache lacks a method or this was called before.
pub fn install() -> Result<(), String> {
    let mut base = std::mem::MaybeUninit::<ffi::sqlite3_pcache_methods2>::zeroed();
    // SAFETY: GETPCACHE2 writes one `sqlite3_pcache_methods2` to the pointer it is given.
    let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_GETPCACHE2, base.as_mut_ptr()) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("sqlite3_config(GETPCACHE2) = {rc}"));
    }
    // SAFETY: written by SQLite just above (all zeroes, i.e. no methods, had it not).
    let base = unsafe { base.assume_init() };
    let complete = base.xInit.is_some()
        && base.xShutdown.is_some()
        && base.xCreate.is_some()
        && base.xCachesize.is_some()
        && base.xPagecount.is_some()
        && base.xFetch.is_some()
        && base.xUnpin.is_some()
        && base.xRekey.is_some()
        && base.xTruncate.is_some()
        && base.xDestroy.is_some()
        && base.xShrink.is_some();
    if !complete {
        return Err("sqlite's default page cache lacks a method".into());
    }
    let ours = ffi::sqlite3_pcache_methods2 {
        iVersion: base.iVersion,
        pArg: base.pArg,
        xInit: Some(x_init),
        xShutdown: Some(x_shutdown),
        xCreate: Some(x_create),
        xCachesize: Some(x_cachesize),
        xPagecount: Some(x_pagecount),
        xFetch: Some(x_fetch),
        xUnpin: Some(x_unpin),
        xRekey: Some(x_rekey),
        xTruncate: Some(x_truncate),
        xDestroy: Some(x_destroy),
        xShrink: Some(x_shrink),
    };
    if BASE.set(Base(base)).is_err() {
        return Err("installed twice".into());
    }
    // SAFETY: PCACHE2 copies the struct it is pointed at; every method in it is defined here
    // and forwards to `base`, set just above.
    let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE2, &raw const ours) };
    if rc != ffi::SQLITE_OK {
        return Err(format!("sqlite3_config(PCACHE2) = {rc}"));
    }
    INSTALLED.store(true, Ordering::Relaxed);
    Ok(())
}

unsafe extern "C" fn x_init(arg: *mut c_void) -> c_int {
    // SAFETY: forwarded with SQLite's own argument.
    unsafe { base().xInit.expect("checked at install")(arg) }
}

unsafe extern "C" fn x_shutdown(arg: *mut c_void) {
    // SAFETY: forwarded with SQLite's own argument.
    unsafe { base().xShutdown.expect("checked at install")(arg) }
}

unsafe extern "C" fn x_create(
    page_size: c_int,
    extra: c_int,
    purgeable: c_int,
) -> *mut ffi::sqlite3_pcache {
    // SAFETY: forwarded as SQLite called it.
    let inner = unsafe { base().xCreate.expect("checked at install")(page_size, extra, purgeable) };
    if inner.is_null() {
        return inner;
    }
    let bound = Bound::new(u32::try_from(page_size).unwrap_or(1));
    Box::into_raw(Box::new(Wrapped { inner, bound })).cast()
}

unsafe extern "C" fn x_cachesize(p: *mut ffi::sqlite3_pcache, size: c_int) {
    // SAFETY: `p` is one of ours (SQLite passes back what `x_create` returned).
    unsafe { base().xCachesize.expect("checked at install")(wrapped(p).inner, size) }
}

unsafe extern "C" fn x_pagecount(p: *mut ffi::sqlite3_pcache) -> c_int {
    // SAFETY: as in `x_cachesize`.
    unsafe { base().xPagecount.expect("checked at install")(wrapped(p).inner) }
}

unsafe extern "C" fn x_fetch(
    p: *mut ffi::sqlite3_pcache,
    key: c_uint,
    create: c_int,
) -> *mut ffi::sqlite3_pcache_page {
    // SAFETY: as in `x_cachesize`.
    let cache = unsafe { wrapped(p) };
    // SAFETY: forwarded to the cache it wraps.
    let page = unsafe { base().xFetch.expect("checked at install")(cache.inner, key, create) };
    if !page.is_null() {
        cache.bound.fetched(key);
    }
    page
}

unsafe extern "C" fn x_unpin(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    discard: c_int,
) {
    // SAFETY: as in `x_cachesize`; `page` is the wrapped cache's own.
    unsafe { base().xUnpin.expect("checked at install")(wrapped(p).inner, page, discard) }
}

unsafe extern "C" fn x_rekey(
    p: *mut ffi::sqlite3_pcache,
    page: *mut ffi::sqlite3_pcache_page,
    old: c_uint,
    new: c_uint,
) {
    // SAFETY: as in `x_unpin`.
    let cache = unsafe { wrapped(p) };
    // SAFETY: forwarded to the cache it wraps.
    unsafe { base().xRekey.expect("checked at install")(cache.inner, page, old, new) };
    cache.bound.rekeyed(old, new);
}

unsafe extern "C" fn x_truncate(p: *mut ffi::sqlite3_pcache, limit: c_uint) {
    // SAFETY: as in `x_cachesize`.
    let cache = unsafe { wrapped(p) };
    if cache.bound.may_hold_from(limit) {
        // SAFETY: forwarded to the cache it wraps.
        unsafe { base().xTruncate.expect("checked at install")(cache.inner, limit) };
        cache.bound.truncated(limit);
    } else if cache.bound.would_walk(limit) {
        WALKS_SAVED.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe extern "C" fn x_destroy(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: `p` came from `Box::into_raw` in `x_create`; SQLite destroys a cache once and
    // calls nothing on it afterwards.
    let cache = unsafe { Box::from_raw(p.cast::<Wrapped>()) };
    // SAFETY: forwarded to the cache it wraps, destroyed with it.
    unsafe { base().xDestroy.expect("checked at install")(cache.inner) }
}

unsafe extern "C" fn x_shrink(p: *mut ffi::sqlite3_pcache) {
    // SAFETY: as in `x_cachesize`.
    unsafe { base().xShrink.expect("checked at install")(wrapped(p).inner) }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// The spare number of 1 KiB and 4 KiB pages, as SQLite's balance computes it.
    #[test]
    fn the_spare_page_is_the_lock_byte_page() {
        assert_eq!(Bound::new(1024).spare(), 1_048_577);
        assert_eq!(Bound::new(4096).spare(), 262_145);
    }

    /// Balance's swap of two pages through the spare number leaves nothing to truncate.
    #[test]
    fn a_swap_through_the_spare_page_needs_no_truncation() {
        let mut b = Bound::new(1024);
        for key in [3, 7, 9] {
            b.fetched(key);
        }
        let spare = b.spare();
        b.rekeyed(9, spare);
        assert!(b.may_hold_from(10), "mid-swap the spare page is cached");
        b.rekeyed(3, 9);
        b.rekeyed(spare, 3);
        assert!(!b.may_hold_from(10));
        assert!(b.would_walk(10), "SQLite's own cache would walk here");
        assert!(!b.would_walk(spare + 1), "nor past the lock byte");
        assert!(b.may_hold_from(9));
        b.truncated(5);
        assert!(!b.may_hold_from(5));
        assert!(b.may_hold_from(4));
        assert!(!b.would_walk(5));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Fetch(u32),
        Drop(usize),
        Rekey(usize, u32),
        Truncate(u32),
    }

    /// The model's page size, and its spare number: past every other number drawn.
    const PAGE_SIZE: u32 = 1 << 24;
    const SPARE: u32 = PENDING_BYTE / PAGE_SIZE + 1;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u32..=SPARE).prop_map(Op::Fetch),
            any::<usize>().prop_map(Op::Drop),
            (any::<usize>(), 1u32..64).prop_map(|(i, k)| Op::Rekey(i, k)),
            any::<usize>().prop_map(|i| Op::Rekey(i, SPARE)),
            (0u32..70).prop_map(Op::Truncate),
        ]
    }

    proptest! {
        /// Against a model cache (page id → number): whenever the bound says a truncation has
        /// nothing to drop, the model holds no page at or past its limit.
        #[test]
        fn the_bound_never_skips_a_truncation_that_would_drop_a_page(
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let mut bound = Bound::new(PAGE_SIZE);
            prop_assert_eq!(bound.spare(), SPARE);
            let mut cache: BTreeMap<u32, u32> = BTreeMap::new(); // id → key
            let mut next_id = 0;
            for op in ops {
                let ids: Vec<u32> = cache.keys().copied().collect();
                let pick = |i: usize| (!ids.is_empty()).then(|| ids[i % ids.len()]);
                match op {
                    Op::Fetch(key) => {
                        if !cache.values().any(|&k| k == key) {
                            cache.insert(next_id, key);
                            next_id += 1;
                        }
                        bound.fetched(key);
                    }
                    Op::Drop(i) => {
                        if let Some(id) = pick(i) {
                            cache.remove(&id);
                        }
                    }
                    Op::Rekey(i, new) => {
                        if let Some(id) = pick(i)
                            && !cache.values().any(|&k| k == new)
                        {
                            let old = cache[&id];
                            cache.insert(id, new);
                            bound.rekeyed(old, new);
                        }
                    }
                    Op::Truncate(limit) => {
                        if cache.values().any(|&k| k >= limit) {
                            prop_assert!(bound.may_hold_from(limit));
                        }
                        if bound.may_hold_from(limit) {
                            cache.retain(|_, k| *k < limit);
                            bound.truncated(limit);
                        }
                    }
                }
            }
        }
    }
}
