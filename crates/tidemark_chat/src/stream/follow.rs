//! Wake-ups across nodes: where the outbox is a shared log (a Kafka-protocol broker), SENDs
//! reach the node a client streams from through it. Each API node follows every partition of
//! the log from its end at start, and wakes its streams for each record's conversation, as a
//! commit on the node itself does. The log is only the wake-up: streams read the messages from
//! the hot tier and the archive, so a record that is late, repeated or missed by a restart
//! loses nothing (a resume replays from the client's position). Seed 000's ADR-0012 keeps
//! broker transactions out of this fanout: it only reads.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ports::Outbox;
use crate::service::ChatService;

/// How often the follower asks each partition for new records: the most a SEND made on
/// another node waits before a stream here looks for it.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(50);

/// Records read per partition per look.
const FOLLOW_BATCH: usize = 1_000;

/// Follows `outbox` from its end until `cancel`, waking `svc`'s streams for each record's
/// conversation. A failed read is retried after a second; a partition whose log was truncated
/// past the follower goes on from its new start.
pub async fn follow_outbox(svc: ChatService, outbox: Arc<dyn Outbox>, cancel: CancellationToken) {
    let partitions = outbox.partitions();
    let mut next: Vec<Option<u64>> = vec![None; partitions as usize];
    loop {
        let mut failed = false;
        for p in 0..partitions {
            match follow_once(&svc, outbox.as_ref(), p, &mut next[p as usize]).await {
                Ok(()) => {}
                Err(error) => {
                    failed = true;
                    tracing::debug!(%error, partition = p, "stream follower: outbox read failed");
                }
            }
        }
        let pause = if failed {
            Duration::from_secs(1)
        } else {
            FOLLOW_INTERVAL
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = cancel.cancelled() => return,
        }
    }
}

/// One look at partition `p`: from `next` (its end, the first time) to its end.
async fn follow_once(
    svc: &ChatService,
    outbox: &dyn Outbox,
    p: u32,
    next: &mut Option<u64>,
) -> crate::error::Result<()> {
    let (low, high) = outbox.offsets(p).await?;
    let from = match *next {
        None => {
            *next = Some(high);
            return Ok(());
        }
        Some(n) => n.max(low),
    };
    if from >= high {
        *next = Some(from);
        return Ok(());
    }
    let records = outbox.fetch(p, from, FOLLOW_BATCH).await?;
    let mut to = from;
    for (offset, record) in records {
        to = offset + 1;
        match svc.members(&record.tenant, &record.conversation_id).await {
            Ok(members) => {
                svc.streams()
                    .committed(&record.tenant, &record.conversation_id, &members)
            }
            Err(error) => tracing::debug!(%error, "stream follower: members not read"),
        }
    }
    *next = Some(to);
    Ok(())
}
