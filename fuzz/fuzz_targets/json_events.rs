//! The JSON ingest decoder (array or NDJSON): any body decodes to events or a clear error,
//! never a panic; an RFC 3339 time is floored to its millisecond.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_events::ingest::decode_json;
use tidemark_events::schema::Schema;

const MAX_EVENTS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let schema = Schema::default();
    if let Ok(events) = decode_json(&schema, body, MAX_EVENTS) {
        assert!(events.len() <= MAX_EVENTS);
    }
});
