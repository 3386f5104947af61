//! The links service: mailings, render/send calls (validated, stored in one batch before
//! answering), suppressions, and the redirector's lookups. HTTP-independent.

use std::str::FromStr;
use std::sync::Arc;

use tidemark_core::clock::SharedClock;
use tidemark_core::cpu::CpuPool;
use tidemark_core::day::Day;
use tidemark_core::health::StoreHealth;
use tidemark_events::Ingest;

mod open;

pub use open::load_or_create_secret;

use crate::builder::{Build, Builder, BuiltMessage, Recipient, Skipped};
use crate::config::LinksConfig;
use crate::deliveries::Deliveries;
use crate::error::{LinksError, Result};
use crate::hit_events::HitEvents;
use crate::id::IdCodec;
use crate::metrics::LinksMetrics;
use crate::model::{Lookup, Mailing};
use crate::partitions::oldest_kept;
use crate::redirect::hit_event;
use crate::render::MailTemplate;
use crate::rewrite::{LinkKind, RewriteConfig};
use crate::rules::RuleConfig;
use crate::send::{OutgoingMail, SendingPool};
use crate::stats::{
    HitKind, HitSource, MailingStats, StatsHit, counter, is_image_proxy, mailing_stats,
    rendered_links, skip_reason,
};
use crate::store::{LinkStore, MailingStore};
use crate::user_agent::{classify_user_agent, is_bot_hit};

/// Which tracking route was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/c/<id>`: links and tracked images.
    Click,
    /// `/o/<id>`: the open pixel.
    Open,
}

/// What the redirector answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hit {
    /// 302 to this URL, byte for byte.
    Redirect(String),
    /// 200 with the 1×1 GIF.
    Pixel,
    /// 302 to the configured fallback: the id's day partition was dropped.
    Expired(String),
    /// 404: malformed, forged or unknown id, or an id of the other route.
    NotFound,
}

/// What an unsubscribe link (`/u/<id>`) leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnsubscribeLink {
    /// The recipient of a message of a mailing.
    Recipient {
        /// The address, as the message was sent to it.
        email: String,
        /// The mailing's `From:` address.
        from: String,
    },
    /// A malformed, forged or unknown id, or one of a link rather than a message.
    Unknown,
    /// The id's day partition was dropped.
    Expired,
}

/// The result of a send call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOutcome {
    /// Messages handed to the sending pool.
    pub queued: usize,
    /// Recipients skipped, with reasons.
    pub skipped: Vec<Skipped>,
}

/// The links subsystem's API.
#[derive(Debug, Clone)]
pub struct LinksService {
    links: Arc<dyn LinkStore>,
    mailings: Arc<dyn MailingStore>,
    pool: Arc<SendingPool>,
    codec: IdCodec,
    rewrite: RewriteConfig,
    cfg: LinksConfig,
    clock: SharedClock,
    metrics: LinksMetrics,
    /// The hit events, written in groups off the redirector's path.
    hit_events: HitEvents,
    /// The sending pool's outcomes, written in groups to the statistics.
    deliveries: Deliveries,
    /// Where its writes are reported ([`LinksService::with_store_health`]).
    health: StoreHealth,
    /// Where mailings are rendered, off the runtime's workers.
    cpu: CpuPool,
}

/// Largest answer a render or send builds whole in memory (bytes, estimated as recipients ×
/// the template's size): past it the call is refused, and a render can be streamed instead.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// Refuses a call whose messages would together exceed [`MAX_ANSWER_BYTES`].
fn check_answer_size(mailing: &Mailing, recipients: usize) -> Result<()> {
    let each = mailing.html.len() + mailing.subject.len();
    let total = each.saturating_mul(recipients);
    if total > MAX_ANSWER_BYTES {
        return Err(LinksError::Invalid(format!(
            "{recipients} recipients × a {each}-byte template ≈ {total} bytes of messages; at most \
             {MAX_ANSWER_BYTES} in one answer: stream the render (Accept: application/x-ndjson) \
             or split the recipients over several calls"
        )));
    }
    Ok(())
}

/// The link and mailing stores' name in the node's [`StoreHealth`].
pub const LINKS_STORE: &str = "links store";

impl LinksService {
    /// A service over the given stores and pool; the pool's outcomes go to `mailings`'
    /// campaign statistics ([`SendingPool::report_to`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        links: Arc<dyn LinkStore>,
        mailings: Arc<dyn MailingStore>,
        ingest: Ingest,
        pool: Arc<SendingPool>,
        codec: IdCodec,
        cfg: LinksConfig,
        clock: SharedClock,
        metrics: LinksMetrics,
    ) -> Self {
        let rewrite = RewriteConfig {
            rules: RuleConfig {
                own_hosts: vec![cfg.track_host()],
                unsubscribe_markers: cfg.unsubscribe_markers.clone(),
            },
            track_images: cfg.track_images,
        };
        let deliveries =
            Deliveries::new(Arc::clone(&mailings), Arc::clone(&clock), metrics.clone());
        pool.report_to(Arc::new(deliveries.clone()));
        Self {
            hit_events: HitEvents::new(ingest, Arc::clone(&mailings), metrics.clone()),
            deliveries,
            links,
            mailings,
            pool,
            codec,
            rewrite,
            cfg,
            clock,
            metrics,
            health: StoreHealth::default(),
            cpu: CpuPool::per_core(),
        }
    }

    /// Reports its writes (mailings, link records, suppressions) to `health`, the node's,
    /// under [`LINKS_STORE`]: a full store makes the node not ready until a write succeeds.
    /// (Hit events go through the events ingest, which reports under its own name.)
    #[must_use]
    pub fn with_store_health(mut self, health: StoreHealth) -> Self {
        self.health = health;
        self
    }

    /// Renders on `cpu`, the node's shared pool, instead of a pool of its own.
    #[must_use]
    pub fn with_cpu_pool(mut self, cpu: CpuPool) -> Self {
        self.cpu = cpu;
        self
    }

    /// Waits until every hit event and delivery outcome handed to the background has been
    /// written (or has failed and been counted). Called at shutdown, and by tests before
    /// they read the events or the statistics.
    pub async fn drain_events(&self) {
        self.hit_events.drain().await;
        self.deliveries.drain().await;
    }

    /// The sending pool's outcomes on their way to the statistics: to drain after the pool
    /// itself was shut down, whose last deliveries report after [`LinksService::drain_events`].
    pub fn deliveries(&self) -> Deliveries {
        self.deliveries.clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> &LinksConfig {
        &self.cfg
    }

    /// The link store (for the partition manager and tests).
    pub fn link_store(&self) -> Arc<dyn LinkStore> {
        Arc::clone(&self.links)
    }

    /// The sending pool.
    pub fn pool(&self) -> &Arc<SendingPool> {
        &self.pool
    }

    /// Creates a mailing. Errors: empty or unparsable template, bad `from` address.
    pub async fn create_mailing(
        &self,
        tenant: &str,
        subject: &str,
        html: &str,
        from: &str,
    ) -> Result<String> {
        if html.trim().is_empty() {
            return Err(LinksError::Invalid("html must not be empty".into()));
        }
        if subject.trim().is_empty() {
            return Err(LinksError::Invalid("subject must not be empty".into()));
        }
        lettre::Address::from_str(from.trim()).map_err(|e| {
            LinksError::Invalid(format!("from {from:?} is not an email address: {e}"))
        })?;
        if html.len() > self.cfg.max_template_bytes {
            return Err(LinksError::Invalid(format!(
                "html is {} bytes; the limit is {} (links.max_template_bytes)",
                html.len(),
                self.cfg.max_template_bytes
            )));
        }
        MailTemplate::compile(html, subject)?;
        let links = crate::rewrite::find_links(html, &self.rewrite)
            .map_err(|e| LinksError::Invalid(e.to_string()))?
            .len();
        if links > self.cfg.max_links_per_message {
            return Err(LinksError::Invalid(format!(
                "the template has {links} trackable links; the limit is {} (links.max_links_per_message)",
                self.cfg.max_links_per_message
            )));
        }
        let mailing = Mailing {
            mailing_id: uuid::Uuid::now_v7().to_string(),
            tenant: tenant.to_owned(),
            subject: subject.to_owned(),
            from: from.trim().to_owned(),
            html: html.to_owned(),
            created_ms: self.clock.now_ms(),
        };
        let id = mailing.mailing_id.clone();
        let created = self.mailings.create_mailing(mailing).await;
        self.health.record(LINKS_STORE, &created);
        created?;
        Ok(id)
    }

    async fn mailing(&self, tenant: &str, mailing_id: &str) -> Result<Mailing> {
        self.mailings
            .mailing(tenant, mailing_id)
            .await?
            .ok_or_else(|| LinksError::UnknownMailing(mailing_id.to_owned()))
    }

    fn check_recipients(&self, recipients: &[Recipient]) -> Result<()> {
        if recipients.is_empty() {
            return Err(LinksError::Invalid("recipients must not be empty".into()));
        }
        if recipients.len() > self.cfg.max_recipients {
            return Err(LinksError::Invalid(format!(
                "{} recipients; at most {} per call",
                recipients.len(),
                self.cfg.max_recipients
            )));
        }
        for (i, r) in recipients.iter().enumerate() {
            lettre::Address::from_str(r.email.trim()).map_err(|e| {
                LinksError::Invalid(format!(
                    "recipient {i}: {:?} is not an email address: {e}",
                    r.email
                ))
            })?;
        }
        Ok(())
    }

    /// Refuses a call whose recipients × the template's trackable links exceed
    /// `links.max_links_per_call`: the links it would store, and the size of its answer, grow
    /// with that product.
    fn check_links_per_call(&self, mailing: &Mailing, recipients: usize) -> Result<()> {
        let links = crate::rewrite::find_links(&mailing.html, &self.rewrite)
            .map_err(|e| LinksError::Invalid(e.to_string()))?
            .len();
        let total = links.saturating_mul(recipients);
        if total > self.cfg.max_links_per_call {
            return Err(LinksError::Invalid(format!(
                "{recipients} recipients × {links} trackable links = {total} tracked links; at most \
                 {} per call (links.max_links_per_call): split the recipients over several calls",
                self.cfg.max_links_per_call
            )));
        }
        Ok(())
    }

    /// Renders the mailing for every recipient and stores all their link records in one batch
    /// before returning. Nothing is stored if anything is invalid. The whole answer is built
    /// in memory, so its estimated size is capped ([`MAX_ANSWER_BYTES`]); a larger render
    /// goes through [`LinksService::prepare_render`] and [`LinksService::render_part`] a
    /// part at a time, as the streamed (NDJSON) render route does.
    pub async fn render(
        &self,
        tenant: &str,
        mailing_id: &str,
        recipients: Vec<Recipient>,
    ) -> Result<(Mailing, Build)> {
        let mailing = self.prepare_render(tenant, mailing_id, &recipients).await?;
        check_answer_size(&mailing, recipients.len())?;
        let build = self.render_part(tenant, &mailing, recipients).await?;
        Ok((mailing, build))
    }

    /// Checks a render before any of it is built: the recipients (1 to
    /// `links.max_recipients`, each an address) and recipients × links against
    /// `links.max_links_per_call`; returns the mailing. Errors: invalid input, no such
    /// mailing, the store.
    pub async fn prepare_render(
        &self,
        tenant: &str,
        mailing_id: &str,
        recipients: &[Recipient],
    ) -> Result<Mailing> {
        self.check_recipients(recipients)?;
        let mailing = self.mailing(tenant, mailing_id).await?;
        self.check_links_per_call(&mailing, recipients.len())?;
        Ok(mailing)
    }

    /// Renders `mailing` (from [`LinksService::prepare_render`]) for `recipients` on the CPU
    /// pool and stores their link records in one batch before returning.
    pub async fn render_part(
        &self,
        tenant: &str,
        mailing: &Mailing,
        recipients: Vec<Recipient>,
    ) -> Result<Build> {
        let emails: Vec<String> = recipients
            .iter()
            .map(|r| r.email.trim().to_lowercase())
            .collect();
        let suppressed = self.mailings.suppressed(tenant, &emails).await?;
        let (m, codec, rewrite) = (mailing.clone(), self.codec.clone(), self.rewrite.clone());
        let base = self.cfg.track_base.trim_end_matches('/').to_owned();
        let now = self.clock.now_ms();
        let max_links = self.cfg.max_links_per_message;
        let build = self
            .cpu
            .run(move || -> Result<Build> {
                let template = MailTemplate::compile(&m.html, &m.subject)?;
                let builder = Builder {
                    template: &template,
                    rewrite: &rewrite,
                    codec: &codec,
                    track_base: &base,
                    mailing_id: &m.mailing_id,
                    max_links,
                };
                Ok(builder.build(&recipients, &suppressed, now))
            })
            .await?;
        let records = build.records.clone();
        let n = records.len() as u64;
        let inserted = self.links.insert(records).await;
        self.health.record(LINKS_STORE, &inserted);
        inserted?;
        self.metrics.records_stored.inc_by(n);
        self.metrics.rendered.inc_by(build.messages.len() as u64);
        self.metrics.skipped.inc_by(build.skipped.len() as u64);
        let mut counts = vec![(counter::RENDERED.to_owned(), build.messages.len() as i64)];
        for s in &build.skipped {
            let name = counter::skipped(skip_reason(&s.reason));
            match counts.iter_mut().find(|(n, _)| *n == name) {
                Some((_, k)) => *k += 1,
                None => counts.push((name, 1)),
            }
        }
        let links = rendered_links(&build.records);
        self.count(&mailing.mailing_id, &counts, &links).await;
        Ok(build)
    }

    /// Adds to a mailing's statistics after its records are stored. A failure here does not
    /// undo the call (its records are stored, its answer is due): it is logged and counted
    /// in `tidemark_links_stats_failures_total`.
    async fn count(&self, mailing_id: &str, counts: &[(String, i64)], links: &[(u32, String)]) {
        if let Err(error) = self.mailings.add_counts(mailing_id, counts, links).await {
            let n = counts.iter().map(|(_, k)| *k).sum::<i64>().max(0) as u64;
            self.metrics.stats_failures.inc_by(n);
            tracing::warn!(%error, mailing = mailing_id, "could not count a render or send");
        }
    }

    /// The campaign statistics of the tenant's mailing ([`crate::stats`]), from its summary
    /// only. Errors: [`LinksError::UnknownMailing`], the store.
    pub async fn stats(&self, tenant: &str, mailing_id: &str) -> Result<MailingStats> {
        let mailing = self.mailing(tenant, mailing_id).await?;
        let stored = self.mailings.stats(mailing_id).await?;
        Ok(mailing_stats(&mailing, &stored))
    }

    /// Renders, stores, and hands every message to the sending pool. Each message's
    /// `List-Unsubscribe` holds `mailto:<from>?subject=unsubscribe` and the recipient's
    /// one-click URL: Tidemark's `/u/<id>` ([`LinksService::unsubscribe`]), or the
    /// recipient's own `unsubscribe_url` field (http or https) when it has one.
    pub async fn send(
        &self,
        tenant: &str,
        mailing_id: &str,
        recipients: Vec<Recipient>,
    ) -> Result<SendOutcome> {
        let unsubscribe: std::collections::HashMap<String, String> = recipients
            .iter()
            .filter_map(|r| {
                let u = r.fields.get("unsubscribe_url")?.as_str()?;
                (u.starts_with("https://") || u.starts_with("http://"))
                    .then(|| (r.email.clone(), u.to_owned()))
            })
            .collect();
        let (mailing, build) = self.render(tenant, mailing_id, recipients).await?;
        let mails: Vec<OutgoingMail> = build
            .messages
            .into_iter()
            .map(
                |BuiltMessage {
                     email,
                     subject,
                     html,
                     unsubscribe_url,
                 }| {
                    let mut list_unsubscribe =
                        vec![format!("mailto:{}?subject=unsubscribe", mailing.from)];
                    list_unsubscribe
                        .push(unsubscribe.get(&email).cloned().unwrap_or(unsubscribe_url));
                    OutgoingMail {
                        mailing_id: mailing.mailing_id.clone(),
                        from: mailing.from.clone(),
                        to: email,
                        subject,
                        html,
                        list_unsubscribe,
                    }
                },
            )
            .collect();
        let queued = self
            .pool
            .enqueue(mails)
            .await
            .map_err(|e| LinksError::Unavailable(format!("sending pool: {e}")))?;
        self.count(
            &mailing.mailing_id,
            &[(counter::HANDED.to_owned(), queued as i64)],
            &[],
        )
        .await;
        Ok(SendOutcome {
            queued,
            skipped: build.skipped,
        })
    }

    /// Adds addresses to the suppression list. Errors on an address that is not one.
    pub async fn suppress(&self, tenant: &str, emails: &[String]) -> Result<usize> {
        if emails.is_empty() {
            return Err(LinksError::Invalid("emails must not be empty".into()));
        }
        for e in emails {
            lettre::Address::from_str(e.trim()).map_err(|err| {
                LinksError::Invalid(format!("{e:?} is not an email address: {err}"))
            })?;
        }
        let normalised: Vec<String> = emails.iter().map(|e| e.trim().to_lowercase()).collect();
        let suppressed = self.mailings.suppress(tenant, &normalised).await;
        self.health.record(LINKS_STORE, &suppressed);
        suppressed?;
        Ok(normalised.len())
    }

    /// Removes an address from the suppression list; returns whether it was there.
    pub async fn unsuppress(&self, tenant: &str, email: &str) -> Result<bool> {
        self.mailings.unsuppress(tenant, email.trim()).await
    }

    /// Whom the unsubscribe id `id` (a message's open-pixel id) names: read only, what the
    /// confirmation page (`GET /u/<id>`) shows.
    pub async fn unsubscribe_link(&self, id: &str) -> Result<UnsubscribeLink> {
        Ok(match self.recipient_of(id).await? {
            Ok((record, mailing)) => UnsubscribeLink::Recipient {
                email: record.email,
                from: mailing.from,
            },
            Err(link) => link,
        })
    }

    /// One-click unsubscribe (RFC 8058, `POST /u/<id>`): puts the recipient on the mailing's
    /// tenant's suppression list, so no later render of any of its mailings includes them,
    /// and counts the unsubscribe in the mailing's statistics (once per recipient). Doing it
    /// again changes nothing. Errors: the stores (the suppression is what must hold; a
    /// statistics failure after it is logged and counted, not returned).
    pub async fn unsubscribe(&self, id: &str) -> Result<UnsubscribeLink> {
        let (record, mailing) = match self.recipient_of(id).await? {
            Ok(found) => found,
            Err(link) => return Ok(link),
        };
        self.suppress(&mailing.tenant, std::slice::from_ref(&record.email))
            .await?;
        let now = self.clock.now_ms();
        let hit = StatsHit {
            mailing_id: mailing.mailing_id.clone(),
            email: record.email.clone(),
            position: None,
            kind: HitKind::Unsubscribe,
            source: HitSource::Person,
            at_ms: now,
        };
        let group = uuid::Uuid::now_v7().to_string();
        if let Err(error) = self.mailings.apply_hits(&group, vec![hit], now).await {
            self.metrics.stats_failures.inc();
            tracing::warn!(%error, mailing = %mailing.mailing_id, "could not count an unsubscribe");
        }
        Ok(UnsubscribeLink::Recipient {
            email: record.email,
            from: mailing.from,
        })
    }

    /// The message record and mailing of an unsubscribe id, or what the link is instead.
    async fn recipient_of(
        &self,
        id: &str,
    ) -> Result<std::result::Result<(crate::model::LinkRecord, Mailing), UnsubscribeLink>> {
        let Ok(id) = self.codec.parse(id) else {
            return Ok(Err(UnsubscribeLink::Unknown));
        };
        let now = self.clock.now_ms();
        let oldest = oldest_kept(Day::of_utc_ms(now), self.cfg.retention_days);
        let record = match self.links.lookup(&id, oldest).await? {
            Lookup::Found(r) if r.kind == LinkKind::Open => r,
            Lookup::Found(_) | Lookup::Unknown => return Ok(Err(UnsubscribeLink::Unknown)),
            Lookup::Expired => return Ok(Err(UnsubscribeLink::Expired)),
        };
        match self.mailings.mailing_by_id(&record.mailing_id).await? {
            Some(mailing) => Ok(Ok((record, mailing))),
            None => Ok(Err(UnsubscribeLink::Unknown)),
        }
    }

    /// The redirector: validates `id` (no storage access if malformed), reads its one
    /// partition, and records the click or open from that row.
    pub async fn hit(
        &self,
        route: Route,
        id: &str,
        head: bool,
        user_agent: Option<&str>,
    ) -> Result<Hit> {
        let Ok(id) = self.codec.parse(id) else {
            self.metrics.not_found.inc();
            return Ok(Hit::NotFound);
        };
        let now = self.clock.now_ms();
        let record = match self
            .links
            .lookup(
                &id,
                oldest_kept(Day::of_utc_ms(now), self.cfg.retention_days),
            )
            .await?
        {
            Lookup::Found(r) => r,
            Lookup::Expired => {
                self.metrics.expired.inc();
                return Ok(Hit::Expired(self.cfg.fallback()));
            }
            Lookup::Unknown => {
                self.metrics.not_found.inc();
                return Ok(Hit::NotFound);
            }
        };
        let (answer, kind) = match (route, record.kind) {
            (Route::Click, LinkKind::Link) => {
                (Hit::Redirect(record.url.clone()), Some("email_click"))
            }
            (Route::Click, LinkKind::Image) => (Hit::Redirect(record.url.clone()), None),
            (Route::Open, LinkKind::Open) => (Hit::Pixel, Some("email_open")),
            _ => {
                self.metrics.not_found.inc();
                return Ok(Hit::NotFound);
            }
        };
        if let Some(kind) = kind {
            let ua = classify_user_agent(user_agent);
            let bot = is_bot_hit(head, ua);
            match (bot, kind) {
                (true, _) => self.metrics.bot_hits.inc(),
                (false, "email_click") => self.metrics.clicks.inc(),
                (false, _) => self.metrics.opens.inc(),
            }
            let event = hit_event(&record, kind, ua, bot, &self.cfg.listing_path_prefix, now);
            let stats = StatsHit {
                source: if head {
                    HitSource::Bot
                } else if is_image_proxy(user_agent) {
                    HitSource::ImageProxy
                } else if bot {
                    HitSource::Bot
                } else {
                    HitSource::Person
                },
                kind: if route == Route::Open {
                    HitKind::Open
                } else {
                    HitKind::Click
                },
                mailing_id: record.mailing_id,
                email: record.email,
                position: record.position,
                at_ms: now,
            };
            // The event is written with the next group of hit events; the visitor does not
            // wait for it (DESIGN principle 1: coordination off the hot path).
            self.hit_events.push(event, Some(stats), now).await?;
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// The generated id secret is readable by its owner only, whatever the umask, and read back
    /// the same (not 0644 under umask 022).
    #[test]
    fn the_generated_secret_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LinksConfig::default();
        let key = load_or_create_secret(&cfg, dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join("id.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create_secret(&cfg, dir.path()).unwrap(), key);
    }
}
