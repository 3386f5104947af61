//! The chat SEND body decoder, as the route runs it: any body is decoded into a checked command
//! or refused with an API error (4xx), never a panic; a command that passes has ids and a body
//! within their limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidemark_chat::http::SendMessage;
use tidemark_chat::service::MAX_ID_BYTES;

const MAX_BODY_BYTES: usize = 256;

fuzz_target!(|data: &[u8]| {
    let decoded = SendMessage::from_bytes(data)
        .and_then(|m| m.into_command("t".into(), "c".into(), MAX_BODY_BYTES));
    match decoded {
        Ok(cmd) => {
            assert!(!cmd.sender.is_empty() && cmd.sender.len() <= MAX_ID_BYTES);
            assert!(!cmd.client_msg_id.is_empty() && cmd.client_msg_id.len() <= MAX_ID_BYTES);
            assert!((1..=MAX_BODY_BYTES).contains(&cmd.body.len()));
        }
        Err(e) => assert!(e.status.is_client_error(), "{e:?}"),
    }
});
