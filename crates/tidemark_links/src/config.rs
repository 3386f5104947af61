//! Links configuration (`[links]`; env `TIDEMARK_LINKS__<KEY>`).

use serde::{Deserialize, Serialize};
use tidemark_core::engine::{EmbeddedStoreKey, is_embedded};

use crate::send::MailConfig;

/// Links settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinksConfig {
    /// Base URL of the tracking domain; links become `<track_base>/c/<id>` and the pixel
    /// `<track_base>/o/<id>`. Links to its host are never tracked again. Default:
    /// `http://<listen address>` (set by the server).
    pub track_base: String,
    /// Where a click on an id whose day partition was dropped goes (default
    /// `<track_base>/expired`).
    pub fallback_url: Option<String>,
    /// Days a link record is kept; whole day partitions are dropped after (default 180).
    pub retention_days: u32,
    /// Also track `<img src>` (images redirect to the original; default off).
    pub track_images: bool,
    /// Most recipients per render/send call (default 10,000).
    pub max_recipients: usize,
    /// Largest mailing template in bytes (default 1 MiB).
    pub max_template_bytes: usize,
    /// Most tracked links in one message (default 500); a recipient whose message would have
    /// more is skipped with a reason, a template that has more is refused.
    pub max_links_per_message: usize,
    /// Most tracked links one render or send call may create: its recipients × the
    /// template's trackable links (default 100,000). A call over it is refused with 400
    /// before anything is rendered; split the recipients over several calls.
    pub max_links_per_call: usize,
    /// 128-bit secret of the id check, 32 hex digits. Default: generated once and kept in
    /// `<data_dir>/links/id.key`. Ids made with another secret are rejected.
    pub id_secret: Option<String>,
    /// Path prefix of listing pages: a tracked link to `…<prefix><listing_id>` carries that
    /// listing id into its click events (default `/item/`).
    pub listing_path_prefix: String,
    /// Case-insensitive substrings marking unsubscribe links, which are never rewritten.
    pub unsubscribe_markers: Vec<String>,
    /// The sending pool.
    pub mail: MailConfig,
    /// Where link records live: `"sqlite"` (default: `<data_dir>/links/links.db`) or a
    /// MariaDB / MySQL URL `mysql://user[:password]@host[:port]/database` (day partitions,
    /// seed 001's production shape; see [`crate::mysql`]). Mailings and the suppression list
    /// stay in the embedded file.
    pub store: String,
}

impl Default for LinksConfig {
    fn default() -> Self {
        Self {
            track_base: String::new(),
            fallback_url: None,
            retention_days: 180,
            track_images: false,
            max_recipients: 10_000,
            max_template_bytes: 1024 * 1024,
            max_links_per_message: 500,
            max_links_per_call: 100_000,
            id_secret: None,
            listing_path_prefix: "/item/".into(),
            unsubscribe_markers: crate::rules::RuleConfig::default().unsubscribe_markers,
            mail: MailConfig::default(),
            store: "sqlite".into(),
        }
    }
}

impl LinksConfig {
    /// The links store keys that name the embedded SQLite store (DESIGN.md "Many nodes": the
    /// nodes of a multi-node deployment share every store, and a SQLite file is one node's):
    /// `links.store`, with the shared engine's URL form to set instead. Empty on MariaDB.
    pub fn embedded_store_keys(&self) -> Vec<EmbeddedStoreKey> {
        let mut keys = Vec::new();
        if is_embedded(&self.store) {
            keys.push(EmbeddedStoreKey {
                key: "links.store",
                shared: "mysql://user:password@host:port/database",
            });
        }
        keys
    }

    /// The fallback URL for expired ids.
    pub fn fallback(&self) -> String {
        self.fallback_url
            .clone()
            .unwrap_or_else(|| format!("{}/expired", self.track_base.trim_end_matches('/')))
    }

    /// Lower-case host of `track_base`.
    pub fn track_host(&self) -> String {
        let rest = self
            .track_base
            .split_once("://")
            .map_or(self.track_base.as_str(), |(_, r)| r);
        rest.split(['/', ':', '?', '#'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_store_keys_name_the_sqlite_link_store() {
        let keys = |cfg: &LinksConfig| -> Vec<String> {
            cfg.embedded_store_keys()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let want = [r#"links.store = "mysql://user:password@host:port/database""#];
        assert_eq!(keys(&LinksConfig::default()), want);
        let empty = LinksConfig {
            store: String::new(),
            ..LinksConfig::default()
        };
        assert_eq!(keys(&empty), want);
        let shared = LinksConfig {
            store: "mysql://root@127.0.0.1:3306/tidemark".into(),
            ..LinksConfig::default()
        };
        assert!(keys(&shared).is_empty());
    }
}
