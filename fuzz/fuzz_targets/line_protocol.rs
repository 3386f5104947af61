//! The line-protocol ingest decoder: any body decodes to events or a clear error, never a
//! panic, and never more events than the batch limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_events::ingest::decode_line_protocol;
use tidemark_events::lineproto::Precision;
use tidemark_events::schema::Schema;

const MAX_EVENTS: usize = 64;

fuzz_target!(|data: &[u8]| {
    let Some((&p, rest)) = data.split_first() else {
        return;
    };
    let Ok(body) = std::str::from_utf8(rest) else {
        return;
    };
    let precision = [Precision::Ns, Precision::Us, Precision::Ms, Precision::S][usize::from(p % 4)];
    let schema = Schema::default();
    if let Ok(events) =
        decode_line_protocol(&schema, body, precision, 1_700_000_000_000, MAX_EVENTS)
    {
        assert!(events.len() <= MAX_EVENTS);
    }
});
