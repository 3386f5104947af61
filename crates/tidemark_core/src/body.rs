//! Request bodies as clients send them: `Content-Encoding: gzip` (Telegraf, the InfluxDB
//! clients) or none, inflated with a bound on the decompressed size. Inflating is CPU work:
//! callers run it on the [`crate::cpu::CpuPool`] with the parse that follows.

use std::borrow::Cow;
use std::io::Read;

use axum::http::{HeaderMap, StatusCode, header};

use crate::http::ApiError;

/// How a request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentEncoding {
    /// As is (no `Content-Encoding`, or `identity`).
    Identity,
    /// `gzip` (or `x-gzip`); several concatenated members are read as one stream, as `gunzip`
    /// does.
    Gzip,
}

impl ContentEncoding {
    /// The encoding a request's headers declare. Errors: 415 `unsupported_media_type` naming
    /// any other encoding, or a list of several.
    pub fn of(headers: &HeaderMap) -> Result<Self, ApiError> {
        let Some(value) = headers.get(header::CONTENT_ENCODING) else {
            return Ok(Self::Identity);
        };
        let name = value.to_str().unwrap_or("").trim();
        if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            Ok(Self::Gzip)
        } else if name.is_empty() || name.eq_ignore_ascii_case("identity") {
            Ok(Self::Identity)
        } else {
            Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "Content-Encoding {:?} is not supported: send gzip or no encoding",
                    String::from_utf8_lossy(value.as_bytes())
                ),
            ))
        }
    }
}

/// The body as decoded, at most `limit` bytes. Decompression stops as soon as the output
/// passes the limit, so a small gzip body that would inflate to gigabytes costs at most
/// `limit` bytes of memory and the time to produce them.
///
/// Errors: 413 `payload_too_large` naming `limit` (bytes, decompressed); 400 `bad_request`
/// for a body that is not valid gzip.
pub fn decode(
    encoding: ContentEncoding,
    body: &[u8],
    limit: usize,
) -> Result<Cow<'_, [u8]>, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the body is larger than {limit} bytes once decompressed (the limit of this route)"
            ),
        )
    };
    match encoding {
        ContentEncoding::Identity if body.len() > limit => Err(too_large()),
        ContentEncoding::Identity => Ok(Cow::Borrowed(body)),
        ContentEncoding::Gzip => {
            let bound = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(body)
                .take(bound)
                .read_to_end(&mut out)
                .map_err(|e| ApiError::bad_request(format!("the body is not valid gzip: {e}")))?;
            if out.len() > limit {
                return Err(too_large());
            }
            Ok(Cow::Owned(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    fn headers(encoding: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, encoding.parse().unwrap());
        h
    }

    #[test]
    fn encodings_are_read_from_the_header() {
        assert_eq!(
            ContentEncoding::of(&HeaderMap::new()).unwrap(),
            ContentEncoding::Identity
        );
        assert_eq!(
            ContentEncoding::of(&headers("identity")).unwrap(),
            ContentEncoding::Identity
        );
        assert_eq!(
            ContentEncoding::of(&headers("GZIP")).unwrap(),
            ContentEncoding::Gzip
        );
        assert_eq!(
            ContentEncoding::of(&headers("x-gzip")).unwrap(),
            ContentEncoding::Gzip
        );
        for refused in ["br", "gzip, br", "deflate"] {
            let e = ContentEncoding::of(&headers(refused)).unwrap_err();
            assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert!(e.message.contains(refused), "{}", e.message);
        }
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        let text = b"listing_event,event=view count=1i\n".repeat(1000);
        let z = gzip(&text);
        assert_eq!(
            decode(ContentEncoding::Gzip, &z, text.len()).unwrap(),
            &text[..]
        );
        let e = decode(ContentEncoding::Gzip, &z, text.len() - 1).unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                "the body is larger than 33999 bytes once decompressed (the limit of this route)"
            )
        );
        // Two members read as one stream.
        let mut two = gzip(b"ab");
        two.extend(gzip(b"cd"));
        assert_eq!(
            decode(ContentEncoding::Gzip, &two, 10).unwrap(),
            &b"abcd"[..]
        );
        let e = decode(ContentEncoding::Gzip, b"not gzip", 10).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            decode(ContentEncoding::Identity, b"abc", 3).unwrap(),
            &b"abc"[..]
        );
        assert_eq!(
            decode(ContentEncoding::Identity, b"abcd", 3)
                .unwrap_err()
                .status,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    /// A gzip bomb (64 MiB of zeros in about 64 KB) costs the limit, not its inflated size.
    #[test]
    fn a_gzip_bomb_is_cut_at_the_limit() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..64 {
            enc.write_all(&zeros).unwrap();
        }
        let bomb = enc.finish().unwrap();
        let started = std::time::Instant::now();
        let e = decode(ContentEncoding::Gzip, &bomb, 1 << 20).unwrap_err();
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
