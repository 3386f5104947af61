//! Errors of the links subsystem and their HTTP mapping.

use tidemark_core::http::ApiError;
use tidemark_core::sqlite::SqliteError;
use tidemark_core::store::{AsStoreError, StoreError};

/// What can go wrong in links.
#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    /// Bad request; nothing stored, nothing sent.
    #[error("{0}")]
    Invalid(String),
    /// No such mailing for this tenant.
    #[error("unknown mailing {0}")]
    UnknownMailing(String),
    /// A store failed; nothing was acknowledged. Its [`tidemark_core::store::ErrorKind`] says
    /// whether to retry and how it answers over HTTP.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A part of the server that is no store (the sending pool, event recording, a render
    /// task) is closed or failed: the server is stopping, or a bug. Nothing was acknowledged;
    /// retryable (another server may take the request).
    #[error("{0}")]
    Unavailable(String),
}

impl LinksError {
    /// Whether trying again later may succeed: a retryable store failure, or a part of the
    /// server that is closed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LinksError::Store(e) => e.is_retryable(),
            LinksError::Unavailable(_) => true,
            LinksError::Invalid(_) | LinksError::UnknownMailing(_) => false,
        }
    }
}

impl AsStoreError for LinksError {
    fn as_store_error(&self) -> Option<&StoreError> {
        match self {
            LinksError::Store(e) => Some(e),
            _ => None,
        }
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        match self {
            LinksError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SqliteError> for LinksError {
    fn from(e: SqliteError) -> Self {
        LinksError::Store(e.into())
    }
}

impl From<rusqlite::Error> for LinksError {
    fn from(e: rusqlite::Error) -> Self {
        LinksError::Store(e.into())
    }
}

impl From<LinksError> for ApiError {
    fn from(e: LinksError) -> Self {
        let msg = e.to_string();
        match e {
            LinksError::Invalid(_) => ApiError::bad_request(msg),
            LinksError::UnknownMailing(_) => ApiError::not_found(msg),
            LinksError::Store(e) => ApiError::from(e),
            LinksError::Unavailable(_) => ApiError::unavailable(msg),
        }
    }
}

/// Links results.
pub type Result<T, E = LinksError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_keep_their_source_and_answer_by_kind() {
        tidemark_core::http::assert_store_failures_pass_through(LinksError::is_retryable);
    }
}
