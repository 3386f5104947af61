//! The chat service: validates requests, checks membership, and calls the commit path and the
//! tiered reads. It also wires the embedded backends and owns the background workers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tidemark_core::clock::SharedClock;
use tidemark_core::health::StoreHealth;
use tidemark_core::hlc::HybridClock;
use tidemark_core::store::StoreError;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::archivers::Archivers;
use crate::commit::{CommitPath, Committer};
use crate::config::{ChatConfig, ChatMode};
use crate::contact::{ContactSink, FirstContact};
use crate::error::{ChatError, Result};
use crate::health::{CommitHealth, HOT_STORE};
use crate::leases::ShardLeases;
use crate::metrics::ChatMetrics;
use crate::model::{ConversationMeta, MessageClass, MessageRecord, SendCommand, SendOutcome};
use crate::ports::{Archive, HotStore, Outbox};
use crate::reads::{self, Anchor, HistoryPage, PageRequest};
use crate::recovery::{Recovery, backfill_untracked};
use crate::sqlite::SqliteHot;
use crate::stream::StreamHub;
use crate::trimmer::Trimmer;

/// Longest user id, conversation member name or client_msg_id, in bytes.
pub const MAX_ID_BYTES: usize = 128;
/// Most members in one conversation.
pub const MAX_MEMBERS: usize = 100;
/// Largest page (`limit`) of a history read.
pub const MAX_PAGE: u64 = 200;

/// The stores chat runs on.
#[derive(Debug, Clone)]
pub struct ChatStores {
    /// Hot store.
    pub hot: Arc<dyn HotStore>,
    /// Outbox (`None` in `hot-only` mode).
    pub outbox: Option<Arc<dyn Outbox>>,
    /// Archive: written in `tiered` and `sync-archive`; in `hot-only` only read, and only if
    /// an earlier tiered run left one (`None` otherwise).
    pub archive: Option<Arc<dyn Archive>>,
    /// How commits reach them.
    pub commit_path: CommitPath,
}

impl ChatStores {
    /// The embedded default: `<dir>/chat/hot.db` (hot store + outbox) and
    /// `<dir>/chat/archive.db`.
    pub fn open_embedded(dir: &Path, cfg: &ChatConfig) -> Result<Self> {
        let dir = dir.join("chat");
        std::fs::create_dir_all(&dir)
            .map_err(|e| StoreError::file(&dir, e).with_context("creating"))?;
        let hot = Arc::new(
            SqliteHot::open(&dir.join("hot.db"), cfg.commit_batch_max)?
                .with_dedup_memory_keys(cfg.dedup_memory_keys),
        );
        let tiered = cfg.mode != ChatMode::HotOnly;
        let archive = crate::stores::sqlite_archive(&dir, cfg)?;
        Ok(Self {
            commit_path: CommitPath::Fused {
                store: Arc::clone(&hot) as _,
                with_outbox: tiered,
            },
            outbox: tiered.then(|| Arc::clone(&hot) as Arc<dyn Outbox>),
            hot,
            archive,
        })
    }
}

/// A new conversation as asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewConversation {
    /// Members (2..=100 distinct ids: not blank, at most [`MAX_ID_BYTES`] bytes, no control
    /// character, no whitespace at either end).
    pub members: Vec<String>,
    /// The listing it is about.
    pub listing_id: Option<u64>,
    /// The client's idempotency key, unique within the tenant: a retry with the same key finds
    /// the conversation the first request created ([`conversation_id_for_key`]) instead of
    /// creating another. `None`: every request creates a new conversation.
    pub client_conversation_id: Option<String>,
    /// The user the key belongs to, when a user token created it: its keys are its own, and
    /// never meet the tenant key's or another user's. `None`: a key of the tenant.
    pub key_owner: Option<String>,
}

/// What [`ChatService::create_conversation`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedConversation {
    /// The conversation's id.
    pub conversation_id: String,
    /// `false` when an earlier request with the same `client_conversation_id` created it.
    pub created: bool,
}

/// The conversation id of the idempotency key `key` in `tenant`: a name-based UUID (version 5,
/// RFC 9562) of both, so that every retry of a creation, on any backend and after any restart,
/// names the same conversation without a lookup table. Ids made without a key are time-ordered
/// UUIDs (version 7) and never equal one of these.
pub fn conversation_id_for_key(tenant: &str, key: &str) -> String {
    /// The namespace of Tidemark's conversation keys (a random UUID, fixed forever: changing it
    /// would make every retry after the change create a second conversation).
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x5c0b_6f2e_8d41_4a57_9e3b_2f61_d0a7_c9e4);
    // Length-prefixed, so that no two (tenant, key) pairs spell the same name.
    let name = format!("{}:{tenant}{key}", tenant.len());
    uuid::Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string()
}

/// A user's view of one conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationSummary {
    /// Conversation id.
    pub conversation_id: String,
    /// Highest seq.
    pub latest_seq: u64,
    /// Messages after the user's read pointer not sent by the user.
    pub unread: u64,
}

/// One page of a user's conversations ([`ChatService::user_conversations_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationsPage {
    /// The page, in conversation id order.
    pub conversations: Vec<ConversationSummary>,
    /// Where the next page starts (its `after`), if more conversations follow.
    pub next_after: Option<String>,
}

/// The chat subsystem's API, independent of HTTP.
#[derive(Debug, Clone)]
pub struct ChatService {
    stores: ChatStores,
    committer: Committer,
    clock: SharedClock,
    cfg: ChatConfig,
    metrics: ChatMetrics,
    /// Members per `(tenant, conversation)`: membership never changes, so a SEND checks it
    /// without a store read once the conversation was seen.
    members: Arc<Mutex<MembersCache>>,
    /// Where first contacts about a listing go, if anywhere ([`crate::contact`]).
    contacts: Option<Arc<dyn ContactSink>>,
    /// The background tasks handing contacts to the sink; [`ChatService::drain_contacts`]
    /// waits for them at shutdown.
    contact_tasks: TaskTracker,
    health: CommitHealth,
    /// The node's full stores ([`tidemark_core::health`]), shared with the workers.
    store_health: StoreHealth,
    /// Set once this service's hot window is recorded in the hot store
    /// ([`ChatService::prepare_hot_store`]).
    hot_store_prepared: Arc<tokio::sync::OnceCell<()>>,
    /// The node's open live streams, woken by commits and read-pointer moves.
    streams: Arc<StreamHub>,
}

/// `(tenant, conversation_id)` → members.
type MembersCache = HashMap<(String, String), Arc<[String]>>;

/// Conversations whose members are kept in memory before the cache starts over.
const MEMBERS_CACHE_MAX: usize = 100_000;

/// [`ChatError::NotMember`] unless `user` is one of `members`.
fn require_member(members: &[String], user: &str, conversation_id: &str) -> Result<()> {
    if members.iter().any(|m| m == user) {
        Ok(())
    } else {
        Err(ChatError::NotMember {
            user: user.to_owned(),
            conversation_id: conversation_id.to_owned(),
        })
    }
}

/// An id a request names, whether it creates it (a member, a `client_msg_id`) or only looks
/// it up (a sender, a reader, a user): not empty, not blank, at most [`MAX_ID_BYTES`] bytes,
/// and no whitespace or invisible character ([`is_invisible`]) at either end. Ids are compared
/// byte for byte, so `" buyer1"` can never match the member `"buyer1"`: it is refused as what
/// it is (400 naming the field), not answered "not a member" (403) or an empty list. No such
/// id can be created either, since members and keys pass here too.
pub(crate) fn check_id(what: &str, v: &str) -> Result<()> {
    if v.is_empty() {
        return Err(ChatError::Invalid(format!("{what} must not be empty")));
    }
    if v.len() > MAX_ID_BYTES {
        return Err(ChatError::Invalid(format!(
            "{what} is {} bytes; the limit is {MAX_ID_BYTES}",
            v.len()
        )));
    }
    let edge = |c: char| c.is_whitespace() || is_invisible(c);
    if v.chars().all(edge) {
        return Err(ChatError::Invalid(format!(
            "{what} must not be blank: {v:?} is only whitespace or invisible characters"
        )));
    }
    if v.trim_matches(edge) != v {
        return Err(ChatError::Invalid(format!(
            "{what} {v:?} starts or ends with whitespace or an invisible character \
             (ids are compared byte for byte)"
        )));
    }
    Ok(())
}

/// Whether the stored conversation `existing` is what `asked` asks for: the same members in
/// any order, the same listing.
fn same_conversation(existing: &ConversationMeta, asked: &NewConversation) -> bool {
    let sorted = |m: &[String]| {
        let mut m = m.to_vec();
        m.sort_unstable();
        m
    };
    existing.listing_id == asked.listing_id && sorted(&existing.members) == sorted(&asked.members)
}

/// An id a request creates (a member of a new conversation, a message's `client_msg_id`, a
/// `client_conversation_id`): [`check_id`], and no control character anywhere, which would
/// make ids that look alike on screen and in logs differ in the store (`"u\u{7}1"` beside
/// `"u1"`). An id that only looks something up may hold one: it is
/// then simply not found.
fn check_new_id(what: &str, v: &str) -> Result<()> {
    check_id(what, v)?;
    if let Some(c) = v.chars().find(|c| c.is_control()) {
        return Err(ChatError::Invalid(format!(
            "{what} {v:?} holds the control character {c:?}"
        )));
    }
    Ok(())
}

/// A page cursor of [`ChatService::user_conversations_page`] (`after`): a conversation id as a
/// page's `next_after` spells it. Every conversation id is a UUID in lowercase hex with hyphens
/// (version 7, or version 5 of a `client_conversation_id`: [`conversation_id_for_key`]), and
/// the page is the ids that sort after the cursor as strings, so anything else (`garbage`, a
/// UUID in capitals or without hyphens, which would sort elsewhere) is refused instead of
/// answering a page that is silently empty or wrong (`after=garbage` would get 200 and no
/// conversations). A well-formed id that names no conversation is a valid cursor.
fn check_cursor(after: &str) -> Result<()> {
    check_conversation_id(after)
}

/// Whether `id` is spelled as every conversation id is (see [`check_cursor`]). Errors:
/// [`ChatError::Invalid`].
pub(crate) fn check_conversation_id(after: &str) -> Result<()> {
    let canonical =
        uuid::Uuid::try_parse(after).is_ok_and(|id| id.hyphenated().to_string() == after);
    if canonical {
        return Ok(());
    }
    Err(ChatError::Invalid(format!(
        "after {:?} is not a conversation id: give a page's next_after, a UUID in lowercase \
         hex with hyphens (8-4-4-4-12)",
        tidemark_core::http::quoted(after, MAX_ID_BYTES)
    )))
}

/// Characters that print as nothing but are not whitespace to [`char::is_whitespace`]: the
/// soft hyphen, the zero-width space and joiners, the direction marks, the word joiner and
/// invisible operators, the byte order mark. Not allowed at either end of an id
/// ([`check_id`]), where `"\u{200b}"` would be a blank id and `"x\u{200b}"` one that looks
/// like `"x"`; inside an id they may be meant (emoji sequences).
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}')
}

impl ChatService {
    /// A service over `stores`. Every time it and its workers read comes from a
    /// [`HybridClock`] over `clock` (DESIGN.md "Many nodes": commit times, trim scores and the
    /// watermark are HLC timestamps), which the stores' own times move forward.
    pub fn new(
        stores: ChatStores,
        clock: SharedClock,
        cfg: ChatConfig,
        metrics: ChatMetrics,
    ) -> Self {
        let clock: SharedClock = Arc::new(HybridClock::new(clock));
        let sync_archive = (cfg.mode == ChatMode::SyncArchive)
            .then(|| stores.archive.clone())
            .flatten();
        let cfg_streams = (cfg.stream_max_per_user, cfg.stream_max_connections);
        let metrics_for_streams = metrics.clone();
        let committer = Committer::new(
            stores.commit_path.clone(),
            Arc::clone(&clock),
            cfg.commit_params(),
            sync_archive,
        );
        Self {
            stores,
            committer,
            clock,
            cfg,
            metrics,
            members: Arc::default(),
            contacts: None,
            contact_tasks: TaskTracker::new(),
            health: CommitHealth::default(),
            store_health: StoreHealth::default(),
            hot_store_prepared: Arc::default(),
            streams: Arc::new(StreamHub::new(
                cfg_streams.0,
                cfg_streams.1,
                metrics_for_streams,
            )),
        }
    }

    /// Once per service, before anything is committed or scored (the first SEND, the workers'
    /// backfill and recovery):
    /// - moves the clock past the highest time the hot store holds
    ///   ([`HotStore::clock_high_water`]), so that a node restarted with its wall clock stepped
    ///   back neither scores a message below the watermark nor dates one before its
    ///   predecessors;
    /// - records the configured hot window: the trimmer's watermark bound rests on the smallest
    ///   window ever recorded ([`crate::trimmer`]).
    async fn prepare_hot_store(&self) -> Result<()> {
        let window_ms = self.cfg.commit_params().hot_window_ms;
        self.hot_store_prepared
            .get_or_try_init(|| async {
                if let Some(high) = self.stores.hot.clock_high_water().await? {
                    self.clock.observe(high);
                }
                let now = self.clock.now_ms();
                self.stores
                    .hot
                    .hot_window_floor(window_ms, now)
                    .await
                    .map(drop)
            })
            .await?;
        Ok(())
    }

    /// Reports the SEND path's and the workers' writes to `health`, the node's (for
    /// `/readyz`); by default to one of the service's own.
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.store_health = health;
        self
    }

    /// Sends each first contact about a listing to `sink` (chat → events).
    pub fn with_contact_sink(mut self, sink: Arc<dyn ContactSink>) -> Self {
        self.contacts = Some(sink);
        self
    }

    /// Waits until every first contact handed off so far was stored or failed (shutdown).
    pub async fn drain_contacts(&self) {
        self.contact_tasks.close();
        self.contact_tasks.wait().await;
    }

    /// After a fresh commit of seq 1: if the conversation is about a listing, hands one
    /// [`FirstContact`] to the sink on a tracked task. A retry is a duplicate, never a fresh
    /// commit, so a contact is never counted twice.
    async fn first_contact(&self, record: &MessageRecord) {
        let Some(sink) = &self.contacts else { return };
        let (tenant, conversation_id) = (record.tenant.as_str(), record.conversation_id.as_str());
        let listing_id = match self.conversation(tenant, conversation_id).await {
            Ok(conv) => conv.listing_id,
            Err(error) => {
                self.metrics.contact_failures.inc();
                tracing::warn!(%error, conversation_id, "first contact: conversation unreadable");
                return;
            }
        };
        let Some(listing_id) = listing_id else { return };
        let contact = FirstContact {
            tenant: tenant.to_owned(),
            conversation_id: conversation_id.to_owned(),
            listing_id,
            sender: record.sender.clone(),
            committed_at_ms: record.committed_at_ms,
        };
        let (sink, metrics) = (Arc::clone(sink), self.metrics.clone());
        self.contact_tasks.spawn(async move {
            let cid = contact.conversation_id.clone();
            match sink.record(contact).await {
                Ok(()) => metrics.contacts.inc(),
                Err(error) => {
                    metrics.contact_failures.inc();
                    tracing::warn!(%error, conversation_id = %cid, "could not record a first contact");
                }
            }
        });
    }

    /// Checks that `sender` is a member, from the cache or the store (errors: unknown
    /// conversation, not a member); the members.
    async fn check_member(
        &self,
        tenant: &str,
        conversation_id: &str,
        sender: &str,
    ) -> Result<Arc<[String]>> {
        let members = self.members(tenant, conversation_id).await?;
        require_member(&members, sender, conversation_id)?;
        Ok(members)
    }

    /// A conversation's members, from the cache or the store (errors: unknown conversation).
    pub(crate) async fn members(
        &self,
        tenant: &str,
        conversation_id: &str,
    ) -> Result<Arc<[String]>> {
        let key = (tenant.to_owned(), conversation_id.to_owned());
        if let Some(m) = self.members.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(m);
        }
        let conv = self.conversation(tenant, conversation_id).await?;
        let m: Arc<[String]> = conv.members.into();
        if let Ok(mut cache) = self.members.lock() {
            if cache.len() >= MEMBERS_CACHE_MAX {
                cache.clear();
            }
            cache.insert(key, Arc::clone(&m));
        }
        Ok(m)
    }

    /// The node's open live streams ([`crate::stream`]).
    pub fn streams(&self) -> &Arc<StreamHub> {
        &self.streams
    }

    /// Chat's metrics.
    pub fn metrics(&self) -> &ChatMetrics {
        &self.metrics
    }

    /// Now, by the service's hybrid logical clock (Unix ms).
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// The configuration in force.
    pub fn config(&self) -> &ChatConfig {
        &self.cfg
    }

    /// Whether the SEND path's commits work ([`crate::health`], for `/readyz`).
    pub fn commit_health(&self) -> &CommitHealth {
        &self.health
    }

    /// The full stores this service and its workers report to ([`ChatService::with_store_health`]).
    pub fn store_health(&self) -> &StoreHealth {
        &self.store_health
    }

    /// Measures the archive's lag and the outbox backlog into their gauges now
    /// ([`crate::trimmer::measure_archive`]; nothing in `hot-only`). Called by `/metrics`.
    ///
    /// # Errors
    /// The outbox's.
    pub async fn refresh_archive_gauges(&self) -> Result<()> {
        if let Some(outbox) = &self.stores.outbox {
            crate::trimmer::measure_archive(
                self.stores.hot.as_ref(),
                outbox.as_ref(),
                &self.metrics,
                self.clock.now_ms(),
            )
            .await?;
        }
        Ok(())
    }

    /// Records a SEND's store failure in [`ChatService::commit_health`].
    fn note_failure(&self, e: &ChatError) {
        self.store_health.failed(HOT_STORE, e);
        if e.is_retryable() {
            self.health.failed(&e.to_string());
        }
    }

    /// The stores (for `/readyz` and tests).
    pub fn stores(&self) -> &ChatStores {
        &self.stores
    }

    /// Creates a conversation, or with a `client_conversation_id` that an earlier request
    /// used, finds the one it created (`created: false`). Errors: [`ChatError::Invalid`] for
    /// bad members, listing or key; [`ChatError::KeyReused`] when the key's conversation has
    /// other members or another listing than asked for.
    pub async fn create_conversation(
        &self,
        tenant: &str,
        new: NewConversation,
    ) -> Result<CreatedConversation> {
        if new.members.len() < 2 || new.members.len() > MAX_MEMBERS {
            return Err(ChatError::Invalid(format!(
                "members must list 2 to {MAX_MEMBERS} users, got {}",
                new.members.len()
            )));
        }
        if let Some(l) = new.listing_id
            && i64::try_from(l).is_err()
        {
            return Err(ChatError::Invalid(format!(
                "listing_id {l} is out of range (at most {})",
                i64::MAX
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for m in &new.members {
            check_new_id("member", m)?;
            if !seen.insert(m.as_str()) {
                return Err(ChatError::Invalid(format!("member {m:?} is listed twice")));
            }
        }
        let conversation_id = match &new.client_conversation_id {
            Some(key) => {
                check_new_id("client_conversation_id", key)?;
                match &new.key_owner {
                    // No key or user id holds a NUL (check_new_id), so an owned key never
                    // spells the tenant's.
                    Some(owner) => conversation_id_for_key(tenant, &format!("\0{owner}\0{key}")),
                    None => conversation_id_for_key(tenant, key),
                }
            }
            None => uuid::Uuid::now_v7().to_string(),
        };
        let created = self
            .stores
            .hot
            .create_conversation(
                tenant,
                &conversation_id,
                &new.members,
                new.listing_id,
                self.clock.now_ms(),
            )
            .await?;
        if !created {
            let existing = self.conversation(tenant, &conversation_id).await?;
            if !same_conversation(&existing, &new) {
                return Err(ChatError::KeyReused(format!(
                    "client_conversation_id {:?} already names conversation {conversation_id} \
                     with other members or another listing",
                    new.client_conversation_id.as_deref().unwrap_or_default()
                )));
            }
        }
        Ok(CreatedConversation {
            conversation_id,
            created,
        })
    }

    /// The conversation, or [`ChatError::UnknownConversation`].
    pub async fn conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
    ) -> Result<ConversationMeta> {
        self.stores
            .hot
            .conversation(tenant, conversation_id)
            .await?
            // Quoted to MAX_ID_BYTES (a 5,000-byte path segment is not echoed whole); no
            // stored id is longer, so a longer one is never found.
            .ok_or_else(|| {
                let shown = tidemark_core::http::quoted(conversation_id, MAX_ID_BYTES);
                ChatError::UnknownConversation(shown.into_owned())
            })
    }

    async fn member_conversation(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
    ) -> Result<ConversationMeta> {
        let conv = self.conversation(tenant, conversation_id).await?;
        require_member(&conv.members, user, conversation_id)?;
        Ok(conv)
    }

    /// SEND. Errors: invalid fields, unknown conversation, sender not a member, store down;
    /// in `sync-archive` mode [`ChatError::NotArchived`] for a message committed but not archived.
    pub async fn send(&self, cmd: SendCommand) -> Result<SendOutcome> {
        check_send(&cmd, self.cfg.max_body_bytes)?;
        let members = self
            .check_member(&cmd.tenant, &cmd.conversation_id, &cmd.sender)
            .await?;
        self.prepare_hot_store().await?;
        let timer = self.metrics.send_seconds.start_timer();
        let origin = self
            .committer
            .archives_before_ack()
            .then(|| (cmd.tenant.clone(), cmd.conversation_id.clone()));
        let outcome = self
            .committer
            .commit(cmd)
            .await
            .inspect_err(|e| self.note_failure(e))?;
        match &outcome {
            SendOutcome::Committed(record) => {
                self.metrics.sends.inc();
                if record.conversation_seq == 1 {
                    self.first_contact(record).await;
                }
            }
            SendOutcome::Duplicate(_) => self.metrics.duplicates.inc(),
        }
        if let Some((tenant, conversation_id)) = origin {
            self.committer
                .archive_before_ack(
                    self.stores.hot.as_ref(),
                    &tenant,
                    &conversation_id,
                    &outcome,
                )
                .await
                .inspect_err(|e| self.note_failure(e))?;
        }
        if let SendOutcome::Committed(record) = &outcome {
            // A retry answered from the dedup entries committed nothing: it says nothing of
            // whether commits work.
            self.health.succeeded();
            self.store_health.wrote(HOT_STORE);
            // Acknowledged (and in sync-archive mode archived): now the members' streams read it.
            self.streams
                .committed(&record.tenant, &record.conversation_id, &members);
        }
        timer.observe_duration();
        Ok(outcome)
    }

    /// PULL_HISTORY, read by `reader`, who must be a member ([`ChatError::NotMember`]
    /// otherwise, before anything is read). `limit` must be 1..=200; the page is cut at
    /// `chat.page_bytes_max` bytes of message JSON ([`reads::cap_page`]).
    pub async fn history(
        &self,
        tenant: &str,
        conversation_id: &str,
        reader: &str,
        anchor: Anchor,
        limit: u64,
    ) -> Result<HistoryPage> {
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(ChatError::Invalid(format!(
                "limit must be 1..={MAX_PAGE}, got {limit}"
            )));
        }
        check_id("user", reader)?;
        let conv = self.conversation(tenant, conversation_id).await?;
        require_member(&conv.members, reader, conversation_id)?;
        let page = PageRequest {
            anchor,
            limit,
            latest_seq: conv.latest_seq,
        };
        let mut page = reads::pull_history(
            self.stores.hot.as_ref(),
            self.stores.archive.as_deref(),
            tenant,
            conversation_id,
            page,
            self.clock.now_ms(),
        )
        .await?;
        reads::cap_page(&mut page, anchor, self.cfg.page_bytes_max);
        Ok(page)
    }

    /// Moves `user`'s read pointer to `seq` (never backwards). `seq` must be ≤ latest.
    pub async fn mark_read(
        &self,
        tenant: &str,
        conversation_id: &str,
        user: &str,
        seq: u64,
    ) -> Result<()> {
        check_id("user", user)?;
        let conv = self
            .member_conversation(tenant, conversation_id, user)
            .await?;
        if seq > conv.latest_seq {
            return Err(ChatError::Invalid(format!(
                "seq {seq} is beyond the latest seq {}",
                conv.latest_seq
            )));
        }
        self.stores
            .hot
            .set_read(tenant, conversation_id, user, seq)
            .await?;
        self.streams.read_moved(tenant, conversation_id, user);
        Ok(())
    }

    /// Unread count of `user` in one conversation, across both tiers.
    pub async fn unread(&self, tenant: &str, conversation_id: &str, user: &str) -> Result<u64> {
        check_id("user", user)?;
        self.check_member(tenant, conversation_id, user).await?;
        let read_seq = self
            .stores
            .hot
            .read_seq(tenant, conversation_id, user)
            .await?;
        reads::unread_count(
            self.stores.hot.as_ref(),
            self.stores.archive.as_deref(),
            tenant,
            conversation_id,
            user,
            read_seq,
            self.clock.now_ms(),
        )
        .await
        .map(|c| c.unread)
    }

    /// Every conversation of the user, with latest seq and unread count, in conversation id
    /// order (fails whole if any count cannot be computed).
    pub async fn user_conversations(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<ConversationSummary>> {
        Ok(self
            .user_conversations_page(tenant, user, None, usize::MAX, None)
            .await?
            .conversations)
    }

    /// One page of the user's conversations in conversation id order: at most `limit` (at
    /// least 1) whose id sorts after `after`, each with its latest seq and unread count (fails
    /// whole if any count cannot be computed). Only the page's counts are read: a user in
    /// thousands of conversations costs one membership read, not thousands of counts, per
    /// page. `only` limits the list to those conversations (a user token's `conversations`),
    /// before paging, so no page names another. Errors: [`ChatError::Invalid`] for a bad
    /// `user` or an `after` that cannot be a conversation id (not a UUID in lowercase hex with
    /// hyphens).
    pub async fn user_conversations_page(
        &self,
        tenant: &str,
        user: &str,
        after: Option<&str>,
        limit: usize,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<ConversationsPage> {
        check_id("user", user)?;
        if let Some(after) = after {
            check_cursor(after)?;
        }
        let limit = limit.max(1);
        let mut memberships = self.stores.hot.memberships(tenant, user).await?;
        memberships.retain(|m| {
            after.is_none_or(|a| m.conversation_id.as_str() > a)
                && only.is_none_or(|o| o.contains(&m.conversation_id))
        });
        memberships.sort_unstable_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
        let more = memberships.len() > limit;
        memberships.truncate(limit);
        let now = self.clock.now_ms();
        let mut conversations = Vec::with_capacity(memberships.len());
        for m in memberships {
            // One atomic hot read gives both the count and the latest seq it is against.
            let count = reads::unread_count(
                self.stores.hot.as_ref(),
                self.stores.archive.as_deref(),
                tenant,
                &m.conversation_id,
                user,
                m.read_seq,
                now,
            )
            .await?;
            conversations.push(ConversationSummary {
                conversation_id: m.conversation_id,
                latest_seq: count.latest_seq,
                unread: count.unread,
            });
        }
        let next_after = more
            .then(|| conversations.last().map(|c| c.conversation_id.clone()))
            .flatten();
        Ok(ConversationsPage {
            conversations,
            next_after,
        })
    }

    /// On a node that serves the API with a shared outbox (`chat.outbox = "kafka://…"`): starts
    /// into `tasks` the follower that wakes this node's live streams for SENDs committed on
    /// other nodes ([`crate::stream::follow_outbox`]), on its own broker client, connecting
    /// (again every second until it can) in the background. Nothing for an embedded outbox,
    /// which one node owns, or in `hot-only` mode.
    pub fn spawn_stream_follower(&self, tasks: &mut JoinSet<()>, cancel: &CancellationToken) {
        if self.cfg.mode == ChatMode::HotOnly || !self.cfg.outbox.starts_with("kafka://") {
            return;
        }
        let (svc, cancel) = (self.clone(), cancel.clone());
        let (url, partitions) = (self.cfg.outbox.clone(), self.cfg.outbox_partitions);
        tasks.spawn(async move {
            let outbox = loop {
                match crate::kafka::KafkaOutbox::connect(&url, partitions).await {
                    Ok(o) => break o,
                    Err(error) => tracing::warn!(%error, "stream follower: outbox not reached"),
                }
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    () = cancel.cancelled() => return,
                }
            };
            crate::stream::follow_outbox(svc, Arc::new(outbox), cancel).await;
        });
    }

    /// Starts the background workers of the configured mode (archiver, trimmer, recovery) into
    /// `tasks`; they stop when `cancel` fires. Errors if the archiver's start rule fails.
    pub async fn spawn_workers(
        &self,
        tasks: &mut JoinSet<()>,
        cancel: &CancellationToken,
    ) -> Result<()> {
        self.prepare_hot_store().await?;
        let s = &self.stores;
        // The node's shard leases, shared by its trimmer and its recovery worker.
        let leases = ShardLeases::new(Arc::clone(&s.hot), self.cfg.shard_lease);
        if let (Some(outbox), Some(archive)) = (&s.outbox, &s.archive) {
            let params = self.cfg.commit_params();
            let n =
                backfill_untracked(s.hot.as_ref(), outbox.as_ref(), &self.clock, params).await?;
            if n > 0 {
                tracing::info!(messages = n, "backfilled hot-only history into the outbox");
            }
            // One archiver per outbox partition this node owns, each with its partition's
            // start rule and position, following ownership as it moves between nodes.
            Archivers::new(
                Arc::clone(outbox),
                Arc::clone(archive),
                Arc::clone(&s.hot),
                Arc::clone(&self.clock),
                self.cfg.archive_batch_max,
                self.cfg.archive_idle,
                self.metrics.clone(),
                self.store_health.clone(),
            )
            .spawn(tasks, cancel)
            .await?;
            let recovery = Recovery::new(
                Arc::clone(&s.hot),
                Arc::clone(outbox),
                Arc::clone(&self.clock),
                self.cfg.commit_params(),
                self.cfg.outbox_recovery_window,
                self.metrics.clone(),
            )
            .with_store_health(self.store_health.clone())
            .with_leases(leases.clone());
            tasks.spawn(recovery.run(cancel.clone()));
        }
        let trimmer = Trimmer::new(
            Arc::clone(&s.hot),
            s.outbox.clone(),
            s.archive.clone(),
            Arc::clone(&self.clock),
            self.cfg.clone(),
            self.metrics.clone(),
        )
        .with_store_health(self.store_health.clone())
        .with_leases(leases);
        tasks.spawn(trimmer.run(cancel.clone()));
        Ok(())
    }
}

/// The checks SEND makes on its fields before it touches a store: `sender` and
/// `client_msg_id` are ids ([`MAX_ID_BYTES`], no blank, no whitespace at either end), the body
/// is 1 to `max_body_bytes` bytes. Errors: [`ChatError::Invalid`] naming the field.
pub fn check_send(cmd: &SendCommand, max_body_bytes: usize) -> Result<()> {
    check_id("sender", &cmd.sender)?;
    check_new_id("client_msg_id", &cmd.client_msg_id)?;
    if cmd.body.is_empty() {
        return Err(ChatError::Invalid("body must not be empty".into()));
    }
    if cmd.body.len() > max_body_bytes {
        return Err(ChatError::Invalid(format!(
            "body is {} bytes; the limit is {max_body_bytes} bytes",
            cmd.body.len()
        )));
    }
    Ok(())
}

/// Parses a message class from its API name.
pub fn parse_class(s: Option<&str>) -> Result<MessageClass> {
    match s {
        None | Some("standard") => Ok(MessageClass::Standard),
        Some("ephemeral24h") => Ok(MessageClass::Ephemeral24h),
        Some(other) => Err(ChatError::Invalid(format!(
            "class must be \"standard\" or \"ephemeral24h\", got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of the [`ChatError::Invalid`] that `check` returns, or `"ok"`.
    fn refusal(check: Result<()>) -> String {
        match check {
            Ok(()) => "ok".to_owned(),
            Err(ChatError::Invalid(message)) => message,
            Err(other) => format!("not Invalid: {other}"),
        }
    }

    /// Each id is refused with what is wrong with it: an empty one as empty, a whitespace-only
    /// one as blank (not "must not be empty"), and one with whitespace or an invisible
    /// character at either end as such, whether it is created (a member) or only looked up (a
    /// sender: `" buyer1"` is not answered 403 "not a member", which it could never be).
    #[test]
    fn an_id_is_refused_with_what_is_wrong_with_it() {
        let cases = [
            ("member", "", "member must not be empty"),
            (
                "sender",
                " \t",
                r#"sender must not be blank: " \t" is only whitespace or invisible characters"#,
            ),
            (
                "user",
                "\u{200b}",
                r#"user must not be blank: "\u{200b}" is only whitespace or invisible characters"#,
            ),
            (
                "sender",
                " buyer1",
                r#"sender " buyer1" starts or ends with whitespace or an invisible character (ids are compared byte for byte)"#,
            ),
            (
                "user",
                "seller7\n",
                r#"user "seller7\n" starts or ends with whitespace or an invisible character (ids are compared byte for byte)"#,
            ),
            (
                "member",
                "x\u{feff}",
                r#"member "x\u{feff}" starts or ends with whitespace or an invisible character (ids are compared byte for byte)"#,
            ),
            (
                "client_msg_id",
                &"k".repeat(MAX_ID_BYTES + 1),
                "client_msg_id is 129 bytes; the limit is 128",
            ),
            ("sender", "buyer 1", "ok"),
            ("sender", &"é".repeat(MAX_ID_BYTES / 2), "ok"),
        ];
        for (what, id, expected) in cases {
            assert_eq!(refusal(check_id(what, id)), expected, "{what} {id:?}");
        }
    }

    /// An id a request creates passes [`check_id`] and holds no control character anywhere; one
    /// that only looks up may (it is then not found).
    #[test]
    fn a_new_id_holds_no_control_character() {
        assert_eq!(
            refusal(check_new_id("member", "u\u{7}1")),
            r#"member "u\u{7}1" holds the control character '\u{7}'"#
        );
        assert_eq!(refusal(check_id("sender", "u\u{7}1")), "ok");
        assert_eq!(
            refusal(check_new_id("member", "\t")),
            r#"member must not be blank: "\t" is only whitespace or invisible characters"#
        );
        assert_eq!(refusal(check_new_id("member", "buyer1")), "ok");
    }

    /// A page cursor is a conversation id as ids are made (a UUID in lowercase hex with
    /// hyphens), named or not; anything else is refused, quoted to 128 bytes.
    #[test]
    fn a_cursor_is_a_conversation_id_as_a_page_spells_it() {
        let made = "0190f3a2-7c4e-7d1b-9a3f-2e5b6c7d8e9f";
        let fresh = uuid::Uuid::now_v7().to_string();
        let keyed = conversation_id_for_key("demo", "buyer1-48213");
        for ok in [
            made,
            fresh.as_str(),
            keyed.as_str(),
            "00000000-0000-0000-0000-000000000000",
        ] {
            assert_eq!(refusal(check_cursor(ok)), "ok", "{ok}");
        }
        let refused = |shown: &str| {
            format!(
                "after {shown} is not a conversation id: give a page's next_after, a UUID in \
                 lowercase hex with hyphens (8-4-4-4-12)"
            )
        };
        let upper = made.to_uppercase();
        let simple = made.replace('-', "");
        let braced = format!("{{{made}}}");
        let long = "g".repeat(5_000);
        let long_shown = format!("\"{}…\"", "g".repeat(MAX_ID_BYTES));
        for (bad, shown) in [
            ("garbage", r#""garbage""#.to_owned()),
            ("", r#""""#.to_owned()),
            (upper.as_str(), format!("{upper:?}")),
            (simple.as_str(), format!("{simple:?}")),
            (braced.as_str(), format!("{braced:?}")),
            (long.as_str(), long_shown),
        ] {
            assert_eq!(refusal(check_cursor(bad)), refused(&shown), "{bad:?}");
        }
    }
}
