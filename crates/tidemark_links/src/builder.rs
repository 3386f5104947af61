//! The mail builder: render → rewrite → link records, for a list of recipients (seed 001
//! steps 1–3). Pure CPU work over one compiled template; storing is the caller's job, in one
//! batch.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::id::IdCodec;
use crate::model::LinkRecord;
use crate::render::MailTemplate;
use crate::rewrite::{LinkKind, RewriteConfig, find_links, pixel_html, splice};

/// One recipient: address and merge fields.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Recipient {
    /// Email address.
    #[schema(format = Email)]
    pub email: String,
    /// Merge fields (`{{ first_name }}` …).
    #[serde(default)]
    #[schema(value_type = Object)]
    pub fields: Map<String, Value>,
}

/// A message ready to send.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct BuiltMessage {
    /// Recipient.
    pub email: String,
    /// Rendered subject.
    pub subject: String,
    /// Rendered and rewritten HTML.
    pub html: String,
    /// The recipient's one-click unsubscribe URL, `<track base>/u/<id>` (RFC 8058: `GET`
    /// shows a confirmation page, `POST` unsubscribes). The id is the message's open-pixel
    /// id: one record serves both.
    pub unsubscribe_url: String,
}

/// A recipient that gets no message, and why (`suppressed`, `missing field x`, …).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Skipped {
    /// Recipient.
    pub email: String,
    /// Why.
    pub reason: String,
}

/// What a build produced.
#[derive(Debug, Default)]
pub struct Build {
    /// Messages, in recipient order.
    pub messages: Vec<BuiltMessage>,
    /// Skipped recipients, in recipient order.
    pub skipped: Vec<Skipped>,
    /// Every link record (links and pixels) of the messages, to store in one batch.
    pub records: Vec<LinkRecord>,
}

/// Builds messages of one mailing.
#[derive(Debug)]
pub struct Builder<'a> {
    /// The compiled template.
    pub template: &'a MailTemplate,
    /// Rewriting rules.
    pub rewrite: &'a RewriteConfig,
    /// Id maker.
    pub codec: &'a IdCodec,
    /// `<track_base>` without a trailing slash.
    pub track_base: &'a str,
    /// The mailing.
    pub mailing_id: &'a str,
    /// Most tracked links in one message.
    pub max_links: usize,
}

impl Builder<'_> {
    /// Builds a message per recipient not in `suppressed` (lower-case addresses); ids are
    /// created at `now_ms`.
    pub fn build(
        &self,
        recipients: &[Recipient],
        suppressed: &HashSet<String>,
        now_ms: i64,
    ) -> Build {
        let mut out = Build::default();
        for r in recipients {
            if suppressed.contains(&r.email.to_lowercase()) {
                out.skipped.push(Skipped {
                    email: r.email.clone(),
                    reason: "suppressed".into(),
                });
                continue;
            }
            match self.one(r, now_ms, &mut out.records) {
                Ok(m) => out.messages.push(m),
                Err(reason) => out.skipped.push(Skipped {
                    email: r.email.clone(),
                    reason,
                }),
            }
        }
        out
    }

    fn one(
        &self,
        r: &Recipient,
        now_ms: i64,
        records: &mut Vec<LinkRecord>,
    ) -> Result<BuiltMessage, String> {
        let rendered = self.template.render(&r.fields)?;
        let found = find_links(&rendered.html, self.rewrite).map_err(|e| e.to_string())?;
        if found.len() > self.max_links {
            return Err(format!(
                "too many links ({} > {} per message)",
                found.len(),
                self.max_links
            ));
        }
        let mut replacements = Vec::with_capacity(found.len());
        let record = |id: String, url: String, position: Option<u32>, kind: LinkKind| LinkRecord {
            link_id: id,
            url,
            email: r.email.clone(),
            mailing_id: self.mailing_id.to_owned(),
            position,
            kind,
            created_ms: now_ms,
        };
        let first = records.len();
        for (i, f) in found.iter().enumerate() {
            let id = self.codec.generate(now_ms);
            replacements.push(format!("{}/c/{id}", self.track_base));
            records.push(record(
                id.to_string(),
                f.url.clone(),
                Some(i as u32),
                f.kind,
            ));
        }
        let pixel_id = self.codec.generate(now_ms);
        let pixel = pixel_html(&format!("{}/o/{pixel_id}", self.track_base));
        records.push(record(
            pixel_id.to_string(),
            String::new(),
            None,
            LinkKind::Open,
        ));
        debug_assert_eq!(records.len() - first, found.len() + 1);
        Ok(BuiltMessage {
            email: r.email.clone(),
            subject: rendered.subject,
            html: splice(&rendered.html, &found, &replacements, Some(&pixel)),
            unsubscribe_url: format!("{}/u/{pixel_id}", self.track_base),
        })
    }
}
