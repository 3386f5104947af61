//! Configuration: one TOML file (`--config`), every key overridable by `TIDEMARK_<KEY>` env
//! vars (nested keys with `__`, e.g. `TIDEMARK_CHAT__HOT_WINDOW=1h`), then by CLI flags.
//! Defaults give the embedded mode with data under `./data`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use tidemark_chat::ChatConfig;
use tidemark_core::engine::EmbeddedStoreKey;
use tidemark_core::user_token::{UserTokenKey, UserTokens};
use tidemark_events::EventsConfig;
use tidemark_links::config::LinksConfig;

/// The API key of the default `demo` tenant; refused unless the server listens on loopback.
pub const DEFAULT_DEV_KEY: &str = "dev-key";

/// Parses a listen address: `ip:port` (`127.0.0.1:8080`, `[::1]:8080`) or `host:port`
/// (`localhost:8080`), the host resolved now, an IPv4 address preferred (`localhost` is
/// `127.0.0.1`, as for the default). Errors say what was expected. For `--listen`,
/// `TIDEMARK_LISTEN` and the file's `listen` alike.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let expected = "expected ip:port or host:port, e.g. 127.0.0.1:8080 or localhost:8080";
    let addrs: Vec<SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("listen address {s:?}: {e}; {expected}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("listen address {s:?} resolves to no address; {expected}"))
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let s = String::deserialize(d)?;
    parse_listen(&s).map_err(serde::de::Error::custom)
}

/// Which part of Tidemark a node runs (`role`, env `TIDEMARK_ROLE`, `tidemark serve --role`;
/// DESIGN.md "Many nodes"): any number of `api` and `workers` nodes share one set of production
/// engines, each with its own data directory. Written `all`, `api` or `workers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The HTTP API and every background worker in one process (the default, and the only role
    /// the embedded SQLite stores allow): what [`Role::Api`] and [`Role::Workers`] run together.
    #[default]
    #[value(help = "the HTTP API and every background worker (default)")]
    All,
    /// The HTTP API only: `/v1` (chat SENDs and reads, mailings, events ingest, reports), `/c`,
    /// `/o`, `/expired`, `/dashboard`, `/v1/openapi.json`, `/healthz`, `/readyz` and `/metrics`,
    /// and the sending pool of the mailings it sends. No background worker: no chat archiver,
    /// trimmer or recovery, no links partition manager (not even its pass at start), no events
    /// lifecycle (rollup, Parquet archive, drop).
    #[value(help = "the HTTP API only, no background worker")]
    Api,
    /// Every background worker: chat's archiver, recovery and trimmer (with the backfill of
    /// untracked hot history at start), the links partition manager (a pass at start, then
    /// hourly) and the events lifecycle (rollup, Parquet archive, drop of raw days). Its listen
    /// address answers only `/healthz`, `/readyz` and `/metrics`; every other path is 404.
    #[value(
        help = "every background worker (archiver, trimmer, recovery, link partitions, \
                    events lifecycle); /healthz, /readyz and /metrics only"
    )]
    Workers,
}

impl Role {
    /// Whether this role answers the HTTP API (`all`, `api`).
    pub fn serves_api(self) -> bool {
        matches!(self, Role::All | Role::Api)
    }

    /// Whether this role runs the background workers (`all`, `workers`).
    pub fn runs_workers(self) -> bool {
        matches!(self, Role::All | Role::Workers)
    }

    /// The name as written in the configuration and on the command line: `all`, `api`,
    /// `workers`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::All => "all",
            Role::Api => "api",
            Role::Workers => "workers",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One tenant and its API key (`Authorization: Bearer <key>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Tenant name; every stored row is keyed by it.
    pub name: String,
    /// The tenant's API key.
    pub key: String,
    /// Verification key of the tenant's chat user tokens, if it issues any
    /// ([`tidemark_core::user_token::UserTokenKey`]): `hs256:<secret of 32 bytes or more>` or
    /// `ed25519:<public key, unpadded base64url>`. Its users' apps then call the chat routes
    /// with a JWT the marketplace backend signed (`aud` = this tenant's name, `sub`, `exp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_token_key: Option<String>,
}

impl TenantConfig {
    /// The parsed [`TenantConfig::user_token_key`], if any. Errors: a key that cannot be used,
    /// naming the tenant.
    pub fn user_token_key(&self) -> Result<Option<UserTokenKey>, ConfigError> {
        self.user_token_key
            .as_deref()
            .map(UserTokenKey::parse)
            .transpose()
            .map_err(|e| ConfigError::Tenants(format!("tenant {:?}: {e}", self.name)))
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What this node runs ([`Role`]; default `all`). `api` and `workers` need every store on a
    /// shared engine ([`Config::validate`]).
    pub role: Role,
    /// Address of the HTTP API (default 127.0.0.1:8080): `ip:port`, or `host:port` resolved
    /// once at start ([`parse_listen`]).
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// Where the embedded stores keep their files (default `./data`).
    pub data_dir: PathBuf,
    /// Tenants and their API keys (default: `demo` with key `dev-key`).
    pub tenants: Vec<TenantConfig>,
    /// A connection must send its request headers within this time (default 30 s).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: std::time::Duration,
    /// A request's body must arrive whole within this time of its headers (default 30 s):
    /// later, 408 `request_timeout` and the connection is closed.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: std::time::Duration,
    /// A connection whose client takes none of an answer's bytes for this long is closed
    /// (default 30 s): a client that stopped reading (a stalled live stream, a slow-read
    /// attack) does not hold a connection, its memory or a graceful stop.
    #[serde(with = "humantime_serde")]
    pub send_timeout: std::time::Duration,
    /// Most connections open at once (default 4,096): beyond it, new connections wait in the
    /// listen backlog until one closes, so a flood of idle or slow clients cannot take every
    /// file descriptor. At least 1.
    pub max_connections: usize,
    /// When set, `GET /metrics` needs `Authorization: Bearer <metrics_key>` (401 otherwise);
    /// unset (the default), it is open to whoever reaches the port, as Prometheus scrapes
    /// usually are. Not one of the tenants' keys: a scraper sees no tenant's data.
    pub metrics_key: Option<String>,
    /// Below this much free space (MiB) on the data directory's file system, `/readyz`
    /// answers 503 `storage_full` (checked at start and every 5 s), before the first write
    /// fails (default 64; 0 turns the check off).
    pub min_free_disk_mb: u64,
    /// The tenant that owns the analytics (events, listings, reports, dashboard) of this
    /// deployment — one marketplace per server; default: the first of `tenants`. Other tenants
    /// get 403 on those routes, and only this tenant's chat contacts become events.
    pub analytics_tenant: Option<String>,
    /// Chat settings (`[chat]`).
    pub chat: ChatConfig,
    /// Link tracking settings (`[links]`).
    pub links: LinksConfig,
    /// Analytics settings (`[events]`).
    pub events: EventsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            role: Role::All,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./data"),
            tenants: vec![TenantConfig {
                name: "demo".into(),
                key: DEFAULT_DEV_KEY.into(),
                user_token_key: None,
            }],
            header_read_timeout: std::time::Duration::from_secs(30),
            body_read_timeout: std::time::Duration::from_secs(30),
            send_timeout: std::time::Duration::from_secs(30),
            max_connections: 4096,
            metrics_key: None,
            min_free_disk_mb: 64,
            analytics_tenant: None,
            chat: ChatConfig::default(),
            links: LinksConfig::default(),
            events: EventsConfig::default(),
        }
    }
}

/// Configuration problems; the server does not start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or an env var could not be read or has a wrong value. Not a `source`: the
    /// message already holds figment's, which an error report would print again below it.
    #[error("configuration: {0}")]
    Invalid(Box<figment::Error>),
    /// The default development key is in use on a non-loopback address.
    #[error(
        "refusing to start: tenant {tenant:?} uses the default key \"{DEFAULT_DEV_KEY}\" while listening on {listen}, which is not loopback; set a real key"
    )]
    DevKeyExposed {
        /// The tenant with the default key.
        tenant: String,
        /// The listen address.
        listen: SocketAddr,
    },
    /// A tenant list that cannot work.
    #[error("configuration: {0}")]
    Tenants(String),
    /// A multi-node role (`api`, `workers`) with stores that name the embedded SQLite store,
    /// which only the one process holding the data directory can use: every such key is named,
    /// with the shared engine's URL to set instead.
    #[error(
        "refusing to start: role \"{role}\" shares its stores with other nodes, but the embedded SQLite store, which only one process can use, is named by {}; set {} (see docs/configuration.md, \"Roles\"), or run one process with role \"all\"",
        key_names(.keys),
        .keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    EmbeddedStores {
        /// The configured role.
        role: Role,
        /// The offending keys, in the order of the file: chat, links, events.
        keys: Vec<EmbeddedStoreKey>,
    },
    /// A setting no deployment can mean (e.g. `chat.trim_batch = 0`), named in the message.
    #[error("configuration: {0}")]
    Value(String),
}

/// `chat.hot, links.store`: the keys alone, for [`ConfigError::EmbeddedStores`].
fn key_names(keys: &[EmbeddedStoreKey]) -> String {
    keys.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
}

/// Whether `key` (an env var's name after `TIDEMARK_`) is one that Kubernetes sets in every
/// pod of a namespace that has a Service named `tidemark` or `tidemark-<x>` (service links, on
/// by default): `<S>_SERVICE_HOST`, `<S>_SERVICE_PORT[_<name>]`, `<S>_PORT` and
/// `<S>_PORT_<port>_<proto>[_PROTO|_PORT|_ADDR]`, `<S>` being `TIDEMARK` or `TIDEMARK_<X>`.
/// These are skipped rather than refused as unknown keys (refused, such a pod would not start).
/// Only top-level names (no `__`), none of which is a configuration key.
fn is_service_link(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key.contains("__") {
        return false;
    }
    // `<x>_` before the part Kubernetes adds, for a Service `tidemark-<x>`.
    let parts: Vec<&str> = key.split('_').collect();
    (0..parts.len()).any(|start| {
        let rest = &parts[start..];
        let prefix_ok = start == 0 || !parts[..start].iter().any(|p| p.is_empty());
        prefix_ok
            && match rest {
                ["service", "host"] => true,
                ["service", "port", ..] => true,
                ["port"] => true,
                ["port", number, proto, tail @ ..] => {
                    number.chars().all(|c| c.is_ascii_digit())
                        && matches!(*proto, "tcp" | "udp" | "sctp")
                        && matches!(tail, [] | ["proto"] | ["port"] | ["addr"])
                }
                _ => false,
            }
    })
}

impl Config {
    /// Defaults, then `file` (if any), then `TIDEMARK_…` env vars (every one must name a key,
    /// except Kubernetes' service links, [`is_service_link`]).
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(f) = file {
            fig = fig.merge(Toml::file_exact(f));
        }
        fig = fig.merge(
            Env::prefixed("TIDEMARK_")
                .ignore(&["config"])
                .filter(|key| !is_service_link(key.as_str()))
                .split("__"),
        );
        let cfg: Config = fig
            .extract()
            .map_err(|e| ConfigError::Invalid(Box::new(e)))?;
        Ok(cfg)
    }

    /// The chat settings in force: `[chat]` with the live streams bounded to three quarters of
    /// `max_connections` whatever `chat.stream_max_connections` says, so that streams cannot
    /// take every connection and leave nothing to answer other requests.
    pub fn chat(&self) -> ChatConfig {
        let mut chat = self.chat.clone();
        let bound = (self.max_connections / 4 * 3).max(1);
        chat.stream_max_connections = chat.stream_max_connections.min(bound);
        chat
    }

    /// The tenants' user-token keys, for the tenants that have one. Errors: as
    /// [`TenantConfig::user_token_key`].
    pub fn user_tokens(&self) -> Result<UserTokens, ConfigError> {
        let mut keys = Vec::new();
        for t in &self.tenants {
            if let Some(key) = t.user_token_key()? {
                keys.push((t.name.clone(), key));
            }
        }
        Ok(UserTokens::new(keys))
    }

    /// Checks the rules that need the whole configuration (keys unique and non-empty, the
    /// default key only on loopback), the chat settings ([`ChatConfig::validate`]), and that a
    /// role other than `all` has no store on the embedded SQLite engine
    /// ([`Config::embedded_store_keys`], [`ConfigError::EmbeddedStores`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut keys = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for t in &self.tenants {
            if !names.insert(&t.name) {
                return Err(ConfigError::Tenants(format!(
                    "tenant {:?} is listed twice",
                    t.name
                )));
            }
            if t.name.is_empty() || t.key.is_empty() {
                return Err(ConfigError::Tenants(
                    "tenant name and key must not be empty".into(),
                ));
            }
            if !keys.insert(&t.key) {
                return Err(ConfigError::Tenants(format!(
                    "tenant {:?} reuses another tenant's key",
                    t.name
                )));
            }
            t.user_token_key()?;
            if t.key == DEFAULT_DEV_KEY && !self.listen.ip().is_loopback() {
                return Err(ConfigError::DevKeyExposed {
                    tenant: t.name.clone(),
                    listen: self.listen,
                });
            }
        }
        if let Some(owner) = &self.analytics_tenant
            && !self.tenants.iter().any(|t| &t.name == owner)
        {
            return Err(ConfigError::Tenants(format!(
                "analytics_tenant {owner:?} is not one of the configured tenants"
            )));
        }
        if self.tenants.is_empty() {
            return Err(ConfigError::Tenants("at least one tenant is needed".into()));
        }
        if self
            .metrics_key
            .as_ref()
            .is_some_and(|k| k.trim().is_empty())
        {
            return Err(ConfigError::Value(
                "metrics_key must not be empty (leave it unset for an open /metrics)".into(),
            ));
        }
        if self.send_timeout.is_zero() {
            return Err(ConfigError::Value(
                "send_timeout must be at least 1ms".into(),
            ));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Value(
                "max_connections must be at least 1".into(),
            ));
        }
        self.chat.validate().map_err(ConfigError::Value)?;
        self.events
            .calendar()
            .map_err(|e| ConfigError::Value(e.to_string()))?;
        if self.role != Role::All {
            let keys = self.embedded_store_keys();
            if !keys.is_empty() {
                return Err(ConfigError::EmbeddedStores {
                    role: self.role,
                    keys,
                });
            }
            // Each node would otherwise make its own secret in its data directory, and the
            // ids one node makes would be refused by the others.
            if self.links.id_secret.is_none() {
                return Err(ConfigError::Value(format!(
                    "refusing to start: role \"{}\" shares its link store with other nodes, which \
                     must all check ids with one secret: set links.id_secret (32 hex digits, the \
                     same on every node; e.g. `openssl rand -hex 16`)",
                    self.role
                )));
            }
        }
        Ok(())
    }

    /// Every store key, of every subsystem, that names the embedded SQLite store: chat's
    /// ([`ChatConfig::embedded_store_keys`]), links' and events'. Empty when the whole node
    /// runs on shared engines.
    pub fn embedded_store_keys(&self) -> Vec<EmbeddedStoreKey> {
        let mut keys = self.chat.embedded_store_keys();
        keys.extend(self.links.embedded_store_keys());
        keys.extend(self.events.embedded_store_keys());
        keys
    }

    /// The tenant owning the analytics: `analytics_tenant`, else the first tenant.
    pub fn analytics_owner(&self) -> &str {
        self.analytics_tenant
            .as_deref()
            .or_else(|| self.tenants.first().map(|t| t.name.as_str()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_key_only_on_loopback() {
        let mut cfg = Config::default();
        assert!(cfg.validate().is_ok());
        cfg.listen = "0.0.0.0:8080".parse().unwrap();
        assert!(matches!(
            cfg.validate(),
            Err(ConfigError::DevKeyExposed { .. })
        ));
        cfg.tenants[0].key = "a-real-secret".into();
        assert!(cfg.validate().is_ok());
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's own signature
    fn file_then_env_override() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "t.toml",
                "listen = \"127.0.0.1:9000\"\n[chat]\nhot_window = \"2h\"\nmode = \"hot-only\"\n",
            )?;
            jail.set_env("TIDEMARK_CHAT__HOT_WINDOW", "3h");
            let cfg = Config::load(Some(Path::new("t.toml"))).expect("loads");
            assert_eq!(cfg.listen.port(), 9000);
            assert_eq!(
                cfg.chat.hot_window,
                std::time::Duration::from_secs(3 * 3600)
            );
            assert_eq!(cfg.chat.mode, tidemark_chat::ChatMode::HotOnly);
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's own signature
    fn the_role_is_all_by_default_and_read_from_the_file_and_the_env() {
        figment::Jail::expect_with(|jail| {
            assert_eq!(Config::load(None).expect("loads").role, Role::All);
            jail.create_file("t.toml", "role = \"workers\"\n")?;
            let cfg = Config::load(Some(Path::new("t.toml"))).expect("loads");
            assert_eq!(cfg.role, Role::Workers);
            jail.set_env("TIDEMARK_ROLE", "api");
            let cfg = Config::load(Some(Path::new("t.toml"))).expect("loads");
            assert_eq!(cfg.role, Role::Api);
            jail.set_env("TIDEMARK_ROLE", "worker");
            let err = Config::load(None).expect_err("not a role").to_string();
            for expected in ["worker", "all", "api", "workers"] {
                assert!(err.contains(expected), "{expected}: {err}");
            }
            Ok(())
        });
    }

    #[test]
    fn role_names_parse_as_on_the_command_line() {
        use clap::ValueEnum;
        for (name, role) in [
            ("all", Role::All),
            ("api", Role::Api),
            ("workers", Role::Workers),
        ] {
            assert_eq!(Role::from_str(name, false), Ok(role));
            assert_eq!(role.to_string(), name);
        }
        assert!(Role::from_str("API", false).is_err());
        assert!(Role::from_str("both", false).is_err());
        let runs = |r: Role| (r.serves_api(), r.runs_workers());
        assert_eq!(runs(Role::All), (true, true));
        assert_eq!(runs(Role::Api), (true, false));
        assert_eq!(runs(Role::Workers), (false, true));
    }

    #[test]
    fn a_multi_node_role_refuses_every_embedded_store_by_name() {
        let mut cfg = Config::default();
        assert!(cfg.validate().is_ok(), "all may use the embedded stores");
        cfg.role = Role::Api;
        let err = cfg.validate().expect_err("refused");
        assert!(matches!(
            err,
            ConfigError::EmbeddedStores {
                role: Role::Api,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "refusing to start: role \"api\" shares its stores with other nodes, but the embedded SQLite store, which only one process can use, is named by chat.hot, chat.outbox, chat.archive, links.store, events.raw, events.rollups; set chat.hot = \"redis://host:port\", chat.outbox = \"kafka://host:port/topic\", chat.archive = \"mysql://user:password@host:port/database\", links.store = \"mysql://user:password@host:port/database\", events.raw = \"influxdb://host:port/database\", events.rollups = \"mysql://user:password@host:port/database\" (see docs/configuration.md, \"Roles\"), or run one process with role \"all\""
        );
        cfg.role = Role::Workers;
        cfg.chat.hot = "redis://127.0.0.1:6379".into();
        cfg.chat.outbox = "kafka://127.0.0.1:9092/chat".into();
        cfg.chat.archive = "mysql://root@127.0.0.1/chat".into();
        cfg.events.raw = "influxdb://127.0.0.1:8086/tidemark".into();
        cfg.events.rollups = "mysql://root@127.0.0.1/rollups".into();
        let err = cfg.validate().expect_err("links.store is still embedded");
        assert_eq!(
            err.to_string(),
            "refusing to start: role \"workers\" shares its stores with other nodes, but the embedded SQLite store, which only one process can use, is named by links.store; set links.store = \"mysql://user:password@host:port/database\" (see docs/configuration.md, \"Roles\"), or run one process with role \"all\""
        );
        cfg.links.store = "mysql://root@127.0.0.1/links".into();
        let err = cfg.validate().expect_err("no id secret");
        assert_eq!(
            err.to_string(),
            "configuration: refusing to start: role \"workers\" shares its link store with other \
             nodes, which must all check ids with one secret: set links.id_secret (32 hex digits, \
             the same on every node; e.g. `openssl rand -hex 16`)"
        );
        cfg.links.id_secret = Some("00112233445566778899aabbccddeeff".into());
        assert!(cfg.validate().is_ok());
        cfg.chat.mode = tidemark_chat::ChatMode::HotOnly;
        cfg.chat.outbox = "sqlite".into();
        cfg.chat.archive = String::new();
        assert!(cfg.validate().is_ok(), "hot-only uses no outbox or archive");
    }

    #[test]
    fn a_listen_address_may_name_a_host() {
        let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(parse_listen("127.0.0.1:9000"), Ok(loopback(9000)));
        assert_eq!(parse_listen(" localhost:9001 "), Ok(loopback(9001)));
        assert_eq!(
            parse_listen("[::1]:9002"),
            Ok(SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 9002)))
        );
        for bad in ["localhost", "127.0.0.1", "localhost:http", ":8080", ""] {
            let err = parse_listen(bad).expect_err(bad);
            assert!(
                err.contains("expected ip:port or host:port"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's own signature
    fn a_host_name_in_the_file_or_the_env_is_resolved() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("t.toml", "listen = \"localhost:9003\"\n")?;
            let cfg = Config::load(Some(Path::new("t.toml"))).expect("loads");
            assert_eq!(cfg.listen, SocketAddr::from(([127, 0, 0, 1], 9003)));
            assert!(
                cfg.validate().is_ok(),
                "localhost is loopback: the dev key is allowed"
            );
            jail.set_env("TIDEMARK_LISTEN", "localhost:9004");
            let cfg = Config::load(Some(Path::new("t.toml"))).expect("loads");
            assert_eq!(cfg.listen.port(), 9004);
            jail.set_env("TIDEMARK_LISTEN", "localhost");
            let err = Config::load(None).expect_err("no port");
            assert!(err.to_string().contains("host:port"), "{err}");
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's own signature
    fn a_zero_chat_setting_is_refused_by_name() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("TIDEMARK_CHAT__TRIM_BATCH", "0");
            let cfg = Config::load(None).expect("loads");
            let err = cfg.validate().expect_err("refused");
            assert_eq!(
                err.to_string(),
                "configuration: chat.trim_batch must be at least 1"
            );
            Ok(())
        });
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment::Jail's own signature
    fn kubernetes_service_links_are_skipped_and_other_unknown_vars_refused() {
        figment::Jail::expect_with(|jail| {
            // What Kubernetes sets for a Service named `tidemark` with a port named `http`.
            jail.set_env("TIDEMARK_SERVICE_HOST", "10.0.0.1");
            jail.set_env("TIDEMARK_SERVICE_PORT", "8080");
            jail.set_env("TIDEMARK_SERVICE_PORT_HTTP", "8080");
            jail.set_env("TIDEMARK_PORT", "tcp://10.0.0.1:8080");
            jail.set_env("TIDEMARK_PORT_8080_TCP", "tcp://10.0.0.1:8080");
            jail.set_env("TIDEMARK_PORT_8080_TCP_PROTO", "tcp");
            jail.set_env("TIDEMARK_PORT_8080_TCP_PORT", "8080");
            jail.set_env("TIDEMARK_PORT_8080_TCP_ADDR", "10.0.0.1");
            // And for Services named `tidemark-redis` and `tidemark-chat-api`.
            jail.set_env("TIDEMARK_REDIS_SERVICE_HOST", "10.0.0.2");
            jail.set_env("TIDEMARK_REDIS_PORT", "tcp://10.0.0.2:6379");
            jail.set_env("TIDEMARK_REDIS_PORT_6379_TCP_PORT", "6379");
            jail.set_env("TIDEMARK_CHAT_API_SERVICE_PORT_HTTP", "80");
            jail.set_env("TIDEMARK_CHAT_API_PORT_80_UDP", "udp://10.0.0.3:80");
            jail.set_env("TIDEMARK_LISTEN", "127.0.0.1:9005");
            let cfg = Config::load(None).expect("service links are not configuration");
            assert_eq!(cfg.listen.port(), 9005);
            for not_a_link in [
                "ports",
                "port_8080",
                "port_x_tcp",
                "chat__port",
                "chat__service_host",
                "_port",
                "listen",
                "reporter",
            ] {
                assert!(!is_service_link(not_a_link), "{not_a_link}");
            }
            jail.set_env("TIDEMARK_LISTN", "127.0.0.1:9006");
            let err = Config::load(None).expect_err("a misspelt key is still refused");
            assert!(err.to_string().contains("listn"), "{err}");
            Ok(())
        });
    }
}
