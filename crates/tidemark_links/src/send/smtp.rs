//! SMTP relay transport (lettre, pooled connections).

use std::fmt;
use std::time::Duration;

use lettre::transport::smtp::PoolConfig;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::{MailTransport, OutgoingMail, SendError, build_message};

/// Timeout of each SMTP command (connect, greeting, each reply), in seconds.
pub const SMTP_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends through one SMTP relay with lettre's `AsyncSmtpTransport` on tokio.
///
/// Up to `connections` idle connections are kept open and reused between messages (the
/// [`super::SendingPool`] runs `connections` workers per relay, so that is also the number of
/// concurrent sessions). Errors: SMTP 5xx replies and client-side problems (e.g. an
/// authentication mechanism the relay lacks) are [`SendError::Permanent`]; 4xx replies,
/// refused or broken connections, timeouts and TLS failures are [`SendError::Transient`].
#[derive(Clone)]
pub struct SmtpRelay {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    /// The URL without its password, for logs.
    shown: String,
}

impl SmtpRelay {
    /// Relay at `url` (lettre syntax: `smtp://host:port`, `smtp://host:port?tls=required`,
    /// `smtps://host:port`, optional `user:password@`), keeping up to `connections` connections
    /// open. Must be called inside a tokio runtime (lettre's pool spawns its idle-connection
    /// reaper there). A URL lettre cannot parse, or no runtime, is [`SendError::Permanent`].
    pub fn new(url: &str, connections: usize) -> Result<Self, SendError> {
        super::current_runtime()?;
        let shown = redact(url);
        let max = u32::try_from(connections.max(1)).unwrap_or(u32::MAX);
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| SendError::Permanent(format!("bad SMTP relay URL {shown}: {e}")))?
            .timeout(Some(SMTP_COMMAND_TIMEOUT))
            .pool_config(PoolConfig::new().max_size(max))
            .build();
        Ok(SmtpRelay { transport, shown })
    }
}

impl fmt::Debug for SmtpRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpRelay")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl MailTransport for SmtpRelay {
    async fn deliver(&self, mail: &OutgoingMail) -> Result<(), SendError> {
        let message = build_message(mail)?;
        match self.transport.send(message).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let text = format!("{} via {}: {e}", mail.to, self.shown);
                if e.is_permanent() || e.is_client() {
                    Err(SendError::Permanent(text))
                } else {
                    Err(SendError::Transient(text))
                }
            }
        }
    }

    async fn close(&self) {
        self.transport.shutdown().await;
    }
}

/// `scheme://user:secret@host…` → `scheme://user:***@host…`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_shown() {
        assert_eq!(redact("smtp://127.0.0.1:25"), "smtp://127.0.0.1:25");
        assert_eq!(
            redact("smtps://bob:s3cr%40t@mail.ex.com:465/helo.ex"),
            "smtps://bob:***@mail.ex.com:465/helo.ex"
        );
    }
}
