//! Tracking id parsing: any string parses or is refused without a panic; an id that parses is
//! 32 characters of the id alphabet and carries a time that fits in 42 bits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_links::id::{ID_LEN, IdCodec};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let codec = IdCodec::new(*b"fuzz-secret-0001");
    if let Ok(id) = codec.parse(s) {
        assert_eq!(id.as_str(), s);
        assert_eq!(s.len(), ID_LEN);
        assert!((0..1 << 42).contains(&id.created_ms()));
    }
    // An id the codec made always parses back, with its time.
    let ms = i64::from(u32::from_le_bytes([
        data.first().copied().unwrap_or(0),
        data.get(1).copied().unwrap_or(0),
        data.get(2).copied().unwrap_or(0),
        data.get(3).copied().unwrap_or(0),
    ])) << 8;
    let made = codec.generate(ms);
    assert_eq!(codec.parse(made.as_str()).map(|id| id.created_ms()), Ok(ms));
});
