//! Errors of the links subsystem and their HTTP mapping.

use tidemark_core::http::ApiError;
use tidemark_core::sqlite::SqliteError;

/// What can go wrong in links.
#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    /// Bad request; nothing stored, nothing sent.
    #[error("{0}")]
    Invalid(String),
    /// No such mailing for this tenant.
    #[error("unknown mailing {0}")]
    UnknownMailing(String),
    /// The store failed; nothing was acknowledged. Retryable.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

impl From<SqliteError> for LinksError {
    fn from(e: SqliteError) -> Self {
        LinksError::Unavailable(e.to_string())
    }
}

impl From<rusqlite::Error> for LinksError {
    fn from(e: rusqlite::Error) -> Self {
        LinksError::Unavailable(format!("sqlite: {e}"))
    }
}

impl From<LinksError> for ApiError {
    fn from(e: LinksError) -> Self {
        let msg = e.to_string();
        match e {
            LinksError::Invalid(_) => ApiError::bad_request(msg),
            LinksError::UnknownMailing(_) => ApiError::not_found(msg),
            LinksError::Unavailable(_) => ApiError::unavailable(msg),
        }
    }
}

/// Links results.
pub type Result<T, E = LinksError> = std::result::Result<T, E>;
