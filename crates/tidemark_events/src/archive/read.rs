//! Reading the archive back as events: which days it holds, and a day's events chunk by chunk
//! (the zone move, [`crate::zone_move`], rebuilds everything from them).

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, RecordBatch};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use parquet::arrow::ParquetRecordBatchStreamBuilder;
use tidemark_core::day::Day;

use super::{ArchiveError, OBJECT_NAME, RawArchive, StoreReader};
use crate::model::Event;

impl RawArchive {
    /// Every day with an archive object, ascending.
    pub async fn archived_days(&self) -> Result<Vec<Day>, ArchiveError> {
        let root = self.prefix.clone().join("events");
        let mut listing = self.store.list(Some(&root));
        let mut days = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta?;
            let mut parts: Vec<_> = meta.location.parts().collect();
            let (Some(name), Some(folder)) = (parts.pop(), parts.pop()) else {
                continue;
            };
            if name.as_ref() != OBJECT_NAME {
                continue;
            }
            if let Some(day) = folder
                .as_ref()
                .strip_prefix("day=")
                .and_then(|d| Day::parse(d).ok())
            {
                days.push(day);
            }
        }
        days.sort_unstable();
        days.dedup();
        Ok(days)
    }

    /// Hands every event of `day`'s archive object to `each`, one record batch at a time, in
    /// the order they were archived. Returns the number of events. Errors: the object is
    /// missing or unreadable, or a column does not hold what [`super::schema`] says.
    pub async fn read_day<F>(&self, day: Day, mut each: F) -> Result<u64, ArchiveError>
    where
        F: AsyncFnMut(Vec<Event>) -> Result<(), ArchiveError>,
    {
        let location = self.day_path(day);
        let size = self.store.head(&location).await?.size;
        let reader = StoreReader {
            store: std::sync::Arc::clone(&self.store),
            location: location.clone(),
            size,
        };
        let malformed = |why: String| ArchiveError::Malformed {
            location: location.to_string(),
            why,
        };
        let mut stream = ParquetRecordBatchStreamBuilder::new(reader)
            .await
            .and_then(|b| b.build())
            .map_err(|e| malformed(e.to_string()))?;
        let mut n = 0u64;
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| malformed(e.to_string()))?;
            let events = from_batch(&batch).map_err(malformed)?;
            n += events.len() as u64;
            each(events).await?;
        }
        Ok(n)
    }

    /// Deletes `day`'s archive object (none is not an error).
    pub async fn delete_day(&self, day: Day) -> Result<(), ArchiveError> {
        match self.store.delete(&self.day_path(day)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The events of one record batch of the archive's [`super::schema`].
fn from_batch(batch: &RecordBatch) -> Result<Vec<Event>, String> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| format!("no column {name}"))
    };
    let time = column("time_ms")?
        .as_primitive_opt::<TimestampMillisecondType>()
        .ok_or("time_ms is not a millisecond timestamp")?;
    let ints = |name: &str| {
        column(name)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| format!("{name} is not an integer column"))
    };
    let strings = |name: &str| {
        column(name)?
            .as_string_opt::<i32>()
            .ok_or_else(|| format!("{name} is not a string column"))
    };
    let (kind, listing, count) = (strings("kind")?, ints("listing_id")?, ints("count")?);
    let (user, device) = (strings("user_id")?, strings("device_id")?);
    let (session, page, fields) = (
        strings("session_id")?,
        strings("page_url")?,
        strings("fields")?,
    );
    let text =
        |a: &arrow_array::StringArray, i: usize| a.is_valid(i).then(|| a.value(i).to_owned());
    (0..batch.num_rows())
        .map(|i| {
            let fields = serde_json::from_str(fields.value(i))
                .map_err(|e| format!("row {i}: fields are not a JSON object: {e}"))?;
            Ok(Event {
                time_ms: time.value(i),
                kind: kind.value(i).to_owned(),
                listing_id: listing.is_valid(i).then(|| listing.value(i)),
                user_id: text(user, i),
                device_id: text(device, i),
                session_id: text(session, i),
                page_url: text(page, i),
                count: count.value(i),
                fields,
            })
        })
        .collect()
}
