//! Which engine a store key names: `"sqlite"` (or nothing), the embedded SQLite file under the
//! node's data directory, which one process owns; or a URL of a shared engine (Redis, a
//! Kafka-protocol broker, MariaDB / MySQL, InfluxDB) that any number of nodes use at once
//! (DESIGN.md "Backends" and "Many nodes"). Each subsystem opens its ports by this rule, and
//! lists the keys of its own that name the embedded store, so that a node of a multi-node
//! deployment refuses to start on a store no other node can see.

use std::fmt;

/// The value of a store key that names the embedded SQLite store (an empty value does too).
pub const EMBEDDED: &str = "sqlite";

/// Whether a store key's `value` names the embedded SQLite store: empty or `"sqlite"`, leading
/// and trailing whitespace ignored. Anything else is a URL, checked by the port that opens it.
pub fn is_embedded(value: &str) -> bool {
    let value = value.trim();
    value.is_empty() || value == EMBEDDED
}

/// A store key whose value names the embedded store, and the form of a shared engine's URL to
/// set instead. Displayed as the line to set: `chat.hot = "redis://host:port"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedStoreKey {
    /// The key as written in the configuration file, with its section: `chat.hot`.
    pub key: &'static str,
    /// The URL form of the shared engine for this port: `redis://host:port`.
    pub shared: &'static str,
}

impl fmt::Display for EmbeddedStoreKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = \"{}\"", self.key, self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_sqlite_name_the_embedded_store_and_urls_do_not() {
        for embedded in ["", "sqlite", " sqlite ", "\t"] {
            assert!(is_embedded(embedded), "{embedded:?}");
        }
        for shared in [
            "redis://127.0.0.1:6379",
            "mysql://root@h/db",
            "SQLite",
            "sqlite://x",
        ] {
            assert!(!is_embedded(shared), "{shared:?}");
        }
    }

    #[test]
    fn a_key_shows_what_to_set_instead() {
        let key = EmbeddedStoreKey {
            key: "chat.hot",
            shared: "redis://host:port",
        };
        assert_eq!(key.to_string(), r#"chat.hot = "redis://host:port""#);
    }
}
