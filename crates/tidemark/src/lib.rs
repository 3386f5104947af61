//! The Tidemark server: configuration ([`config`]), wiring and lifecycle ([`server`]), the
//! cross-subsystem wiring ([`wiring`]), the marketplace-day demo ([`demo`]), the OpenAPI document of the `/v1` routes ([`openapi`]), the offline mail builder ([`mail`]) and the load generators ([`bench`]). The `tidemark` binary is a thin CLI over these.

pub mod bench;
pub mod config;
pub mod demo;
pub mod http_metrics;
pub mod mail;
pub mod openapi;
pub mod rollup_cmd;
pub mod server;
pub mod wiring;
