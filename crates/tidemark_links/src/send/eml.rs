//! `.eml` files: the embedded default's "relay".

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use tidemark_core::store::classify::io_kind;

use super::{MailTransport, OutgoingMail, SendError, build_message};

/// Longest sanitised e-mail address in a file name, in bytes.
const MAX_NAME_EMAIL: usize = 100;

/// Writes each message as an RFC 5322 file
/// `<dir>/<mailing_id>/<unix_ms>-<sanitised email>-<random suffix>.eml`.
///
/// The file is written under a hidden temporary name (`.<name>.tmp`), flushed to disk and
/// renamed, so a reader listing `*.eml` never sees half a message. Path components are
/// sanitised (only `A-Z a-z 0-9 . _ + - @` kept, others become `_`, no leading dot), so a
/// mailing id or address can never leave `dir`.
#[derive(Debug, Clone)]
pub struct EmlDir {
    dir: PathBuf,
}

impl EmlDir {
    /// Files go under `dir` (created on the first message).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        EmlDir { dir: dir.into() }
    }

    /// The root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[async_trait::async_trait]
impl MailTransport for EmlDir {
    async fn deliver(&self, mail: &OutgoingMail) -> Result<(), SendError> {
        let bytes = build_message(mail)?.formatted();
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let suffix: u64 = rand::random();
        let dir = self.dir.join(sanitise(&mail.mailing_id, usize::MAX));
        let name = format!(
            "{unix_ms}-{}-{suffix:016x}.eml",
            sanitise(&mail.to, MAX_NAME_EMAIL)
        );
        tokio::task::spawn_blocking(move || write_atomically(&dir, &name, &bytes))
            .await
            .map_err(|e| SendError::Transient(format!("eml writer task failed: {e}")))?
            .map_err(eml_write_error)
    }
}

/// A failed `.eml` write, sorted by the store error rule ([`io_kind`]): a full disk or an I/O
/// error may pass ([`SendError::Transient`]: retried); no permission, a read-only file
/// system or a path that cannot be made will not ([`SendError::Permanent`]).
fn eml_write_error(e: std::io::Error) -> SendError {
    let message = format!("cannot write .eml file: {e}");
    if io_kind(&e).is_retryable() {
        SendError::Transient(message)
    } else {
        SendError::Permanent(message)
    }
}

/// Temp file in the same directory, fsync, rename.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A safe file-name component: `A-Z a-z 0-9 . _ + - @` kept, anything else `_`, no leading
/// dot, never empty, at most `max` bytes.
fn sanitise(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-' | '@') {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{SendError, eml_write_error, sanitise};

    #[test]
    fn a_full_disk_is_retried_and_no_permission_is_not() {
        use std::io::ErrorKind as K;
        let io = std::io::Error::from;
        assert!(eml_write_error(io(K::StorageFull)).is_transient());
        assert!(eml_write_error(io(K::TimedOut)).is_transient());
        assert!(matches!(
            eml_write_error(io(K::PermissionDenied)),
            SendError::Permanent(m) if m == "cannot write .eml file: permission denied"
        ));
        assert!(!eml_write_error(io(K::ReadOnlyFilesystem)).is_transient());
    }

    #[test]
    fn sanitised_names_stay_in_their_directory() {
        assert_eq!(sanitise("ann.o+news@ex.com", 100), "ann.o+news@ex.com");
        assert_eq!(sanitise("../../etc/passwd", 100), "_.._.._etc_passwd");
        assert_eq!(sanitise("..", 100), "_..");
        assert_eq!(sanitise("", 100), "_");
        assert_eq!(sanitise("Jürgen <j@ex.com>", 100), "J_rgen__j@ex.com_");
        assert_eq!(sanitise("abcdef", 3), "abc");
    }
}
