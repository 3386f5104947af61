//! Tidemark links: newsletter link tracking (DESIGN.md part B, seed 001).
pub mod id;
pub mod rewrite;
pub mod rules;
