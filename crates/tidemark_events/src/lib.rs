//! Tidemark events (seed 002): being built.
