//! The Tidemark server: configuration ([`config`]), wiring and lifecycle ([`server`]), the
//! cross-subsystem wiring ([`wiring`]), the marketplace-day demo ([`demo`]), the OpenAPI
//! document of the `/v1` routes ([`openapi`]) and the offline mail builder ([`mail`]). The
//! `tidemark` binary is a thin CLI over these; the load generators are the `tidemark-bench`
//! binary of the `tidemark_bench` crate.

pub mod config;
pub mod demo;
pub mod http_metrics;
pub mod mail;
pub mod openapi;
pub mod rollup_cmd;
pub mod server;
pub mod wiring;
