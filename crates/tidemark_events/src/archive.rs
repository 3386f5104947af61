//! The raw archive (DESIGN.md part C "Archive", principle 2): each closed raw day is written to
//! object storage as one Parquet object, read back and checked, and only then counts as
//! archived — only an archived (and rolled-up) day may ever leave the raw tier.
//!
//! Layout: `<prefix>/events/day=YYYY-MM-DD/events.parquet`, one object per day, replaced whole
//! when the day is archived again (late events). Columns: `time_ms` (timestamp, ms, UTC),
//! `kind`, `listing_id`, `user_id`, `device_id`, `session_id`, `page_url` (nullable), `count`,
//! `fields` (JSON object of the other fields, `{}` when none); rows in arrival order,
//! zstd-compressed, row groups of at most [`ROW_GROUP_ROWS`] rows.
//!
//! Steps of [`RawArchive::archive_day`]:
//! 1. take the day's catalog entry first: its `last_arrival_ms` is what the archive will be
//!    marked with, so an event arriving during the copy leaves the day dirty;
//! 2. stream the day with [`RawStore::read_chunk`] into record batches, written by a streaming
//!    (multipart) writer to a temporary object beside the final one;
//! 3. read the temporary object back in full and compare its row count with the events read;
//! 4. rename it over the final object, read the final object's footer and compare again;
//! 5. only then [`RawStore::mark_archived`] with the `last_arrival_ms` of step 1 (unless the
//!    catalog now counts more events than were archived while its last arrival is still that
//!    same millisecond: then the day stays unmarked, dirty).
//!
//! Any failure or mismatch returns an error and marks nothing; the previous archive of the day
//! (if any) stays in place until step 4.
//!
//! The store: by default a local directory (`<data_dir>/events/archive`, object_store's
//! `LocalFileSystem`); `events.archive_url` may name a directory, a `file:///…` URL or any
//! URL object_store understands, e.g. `s3://bucket/prefix` (options from the environment:
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`, …).

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryFutureExt};
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::arrow::{AsyncArrowWriter, ParquetRecordBatchStreamBuilder};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::{KeyValue, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use tidemark_core::day::Day;
use tidemark_core::store::classify::{io_kind, io_kind_in_chain};
use tidemark_core::store::{AsStoreError, ErrorKind, StoreError};

use crate::model::Event;
use crate::raw::{DayState, RawStore};

mod read;

/// Events read from the raw tier per chunk (one record batch each).
pub const CHUNK_EVENTS: usize = 16_384;

/// Most rows in one Parquet row group (bounds the writer's memory).
pub const ROW_GROUP_ROWS: usize = 262_144;

/// Name of a day's archive object inside its `day=YYYY-MM-DD` folder.
pub const OBJECT_NAME: &str = "events.parquet";

/// Start of the names of temporary objects (a crash may leave one; the next archive of the
/// day deletes it).
const TMP_PREFIX: &str = ".events.parquet.tmp-";

/// What archiving one day did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveOutcome {
    /// The day.
    pub day: Day,
    /// The object written (`<prefix>/events/day=YYYY-MM-DD/events.parquet`).
    pub location: String,
    /// Rows written, and read back.
    pub rows: u64,
    /// Size of the object in bytes.
    pub bytes: u64,
    /// The arrival the archive is complete as of (the day's `last_arrival_ms` before the copy).
    pub archived_arrival_ms: i64,
    /// Whether the day was marked archived (false only when events arrived within that same
    /// millisecond during the copy: the day stays dirty and is archived again).
    pub marked: bool,
}

/// Why a day was not archived. Nothing is marked archived when any of these occurs.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The day is not in the raw catalog.
    #[error("day {0} is not in the raw tier")]
    UnknownDay(Day),
    /// The day's raw partition was dropped: archiving it again would replace its archive with
    /// whatever arrived since.
    #[error("the raw data of day {0} was dropped; its archive is kept as it is")]
    Dropped(Day),
    /// Fewer events were read than the catalog counted: the raw partition is incomplete.
    #[error("day {day}: read {read} events but the raw catalog counts {catalog}")]
    Incomplete {
        /// The day.
        day: Day,
        /// Events read.
        read: u64,
        /// Events counted by the catalog.
        catalog: u64,
    },
    /// The object read back does not hold the rows written.
    #[error("archive {location}: wrote {expected} rows but read back {found}")]
    RowCount {
        /// The object checked.
        location: String,
        /// Rows written.
        expected: u64,
        /// Rows found.
        found: u64,
    },
    /// The archive URL could not be used.
    #[error("archive URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An archive object does not hold what the archive writes.
    #[error("archive {location} is malformed: {why}")]
    Malformed {
        /// The object.
        location: String,
        /// What is wrong.
        why: String,
    },
    /// The raw tier failed.
    #[error("raw tier: {0}")]
    Raw(#[from] StoreError),
    /// The object store failed.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    /// Parquet encoding or decoding failed.
    #[error("parquet: {0}")]
    Parquet(#[from] ParquetError),
    /// Building a record batch failed.
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
    /// A local directory could not be created.
    #[error("archive directory: {0}")]
    Io(#[from] std::io::Error),
}

/// A store failure inside, for the node's full-disk report ([`tidemark_core::health`]): the
/// raw tier's, or a full disk under the object store or a local directory.
impl AsStoreError for ArchiveError {
    fn as_store_error(&self) -> Option<&StoreError> {
        match self {
            ArchiveError::Raw(e) => Some(e),
            _ => None,
        }
    }
    fn as_store_error_mut(&mut self) -> Option<&mut StoreError> {
        match self {
            ArchiveError::Raw(e) => Some(e),
            _ => None,
        }
    }
    fn store_kind(&self) -> Option<ErrorKind> {
        match self {
            ArchiveError::Raw(e) => Some(e.kind()),
            ArchiveError::Store(e) => io_kind_in_chain(e),
            ArchiveError::Parquet(e) => io_kind_in_chain(e),
            ArchiveError::Io(e) => Some(io_kind(e)),
            _ => None,
        }
    }
}

/// The Arrow schema of an archived day.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new(
            "time_ms",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("kind", DataType::Utf8, false),
        Field::new("listing_id", DataType::Int64, true),
        Field::new("user_id", DataType::Utf8, true),
        Field::new("device_id", DataType::Utf8, true),
        Field::new("session_id", DataType::Utf8, true),
        Field::new("page_url", DataType::Utf8, true),
        Field::new("count", DataType::Int64, false),
        Field::new("fields", DataType::Utf8, false),
    ]))
}

/// One record batch of `events`, in the [`schema`].
pub fn to_batch(schema: &SchemaRef, events: &[Event]) -> Result<RecordBatch, ArrowError> {
    let strings = |f: fn(&Event) -> Option<&str>| -> ArrayRef {
        Arc::new(events.iter().map(f).collect::<StringArray>())
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMillisecondArray::from(events.iter().map(|e| e.time_ms).collect::<Vec<_>>())
                .with_timezone("UTC"),
        ),
        Arc::new(
            events
                .iter()
                .map(|e| Some(e.kind.as_str()))
                .collect::<StringArray>(),
        ),
        Arc::new(events.iter().map(|e| e.listing_id).collect::<Int64Array>()),
        strings(|e| e.user_id.as_deref()),
        strings(|e| e.device_id.as_deref()),
        strings(|e| e.session_id.as_deref()),
        strings(|e| e.page_url.as_deref()),
        Arc::new(events.iter().map(|e| Some(e.count)).collect::<Int64Array>()),
        Arc::new(
            events
                .iter()
                .map(|e| Some(serde_json::to_string(&e.fields).unwrap_or_else(|_| "{}".into())))
                .collect::<StringArray>(),
        ),
    ];
    RecordBatch::try_new(Arc::clone(schema), columns)
}

/// Writes raw days to object storage as Parquet and checks them (see the module docs).
#[derive(Debug, Clone)]
pub struct RawArchive {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    chunk: usize,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl RawArchive {
    /// An archive writing under `prefix` of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: ObjectPath) -> Self {
        Self {
            store,
            prefix,
            chunk: CHUNK_EVENTS,
        }
    }

    /// The archive at `url` (see the module docs), or a local directory `default_dir` when
    /// `url` is `None` or empty. A local directory is created if missing.
    pub fn open(url: Option<&str>, default_dir: &std::path::Path) -> Result<Self, ArchiveError> {
        let env = std::env::vars().filter(|(k, _)| {
            ["AWS_", "GOOGLE_", "AZURE_", "OBJECT_STORE_"]
                .iter()
                .any(|p| k.starts_with(p))
        });
        Self::open_with_options(url, default_dir, env)
    }

    /// [`RawArchive::open`] with explicit object_store options (`aws_endpoint`,
    /// `aws_access_key_id`, `aws_allow_http`, …) instead of the environment.
    pub fn open_with_options(
        url: Option<&str>,
        default_dir: &std::path::Path,
        options: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ArchiveError> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let Some(url) = url else {
            return Self::local_dir(default_dir);
        };
        let bad = |reason: String| ArchiveError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        match url::Url::parse(url) {
            Ok(parsed) if parsed.scheme() == "file" => {
                let path = parsed
                    .to_file_path()
                    .map_err(|()| bad("not a local path".into()))?;
                Self::local_dir(&path)
            }
            Ok(parsed) if parsed.scheme().len() > 1 => {
                // Remote stores speak TLS through rustls; its `ring` provider is installed
                // once per process (an error only says one is installed already).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let (store, prefix) = object_store::parse_url_opts(&parsed, options)
                    .map_err(|e| bad(e.to_string()))?;
                Ok(Self::new(Arc::from(store), prefix))
            }
            // A plain path (`./data/archive`, `/srv/archive`; `C:` style is not supported).
            _ => Self::local_dir(std::path::Path::new(url)),
        }
    }

    fn local_dir(dir: &std::path::Path) -> Result<Self, ArchiveError> {
        std::fs::create_dir_all(dir)?;
        let store = LocalFileSystem::new_with_prefix(dir)?;
        Ok(Self::new(Arc::new(store), ObjectPath::default()))
    }

    /// Reads the raw tier in chunks of `n` events (default [`CHUNK_EVENTS`]). With the `testing`
    /// feature only: tests make a day span several chunks.
    #[cfg(feature = "testing")]
    pub fn with_chunk_size(mut self, n: usize) -> Self {
        self.chunk = n.max(1);
        self
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The folder of a day's archive: `<prefix>/events/day=YYYY-MM-DD`.
    pub fn day_dir(&self, day: Day) -> ObjectPath {
        self.prefix
            .clone()
            .join("events")
            .join(format!("day={day}"))
    }

    /// The archive object of a day: `<prefix>/events/day=YYYY-MM-DD/events.parquet`.
    pub fn day_path(&self, day: Day) -> ObjectPath {
        self.day_dir(day).join(OBJECT_NAME)
    }

    /// Archives one day of `raw` (see the module docs) and marks it archived as of the
    /// `last_arrival_ms` it had before the copy began.
    pub async fn archive_day(
        &self,
        raw: &dyn RawStore,
        day: Day,
    ) -> Result<ArchiveOutcome, ArchiveError> {
        let state = raw
            .days()
            .await?
            .into_iter()
            .find(|s| s.day == day)
            .ok_or(ArchiveError::UnknownDay(day))?;
        if state.dropped_ms.is_some() {
            return Err(ArchiveError::Dropped(day));
        }
        let last_arrival = state.last_arrival_ms;
        self.remove_stale_temporaries(day).await;

        let tmp = self.day_dir(day).join(format!(
            "{TMP_PREFIX}{}-{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let result = self
            .write_and_check(raw, day, last_arrival, state.events, &tmp)
            .await;
        let (rows, bytes) = match result {
            Ok(done) => done,
            Err(e) => {
                if let Err(error) = self.store.delete(&tmp).await
                    && !matches!(error, object_store::Error::NotFound { .. })
                {
                    tracing::warn!(%day, %error, "could not delete temporary archive object");
                }
                return Err(e);
            }
        };
        let location = self.day_path(day);
        self.store.rename(&tmp, &location).await?;
        let found = self.footer_rows(&location).await?;
        if found != rows {
            return Err(ArchiveError::RowCount {
                location: location.to_string(),
                expected: rows,
                found,
            });
        }
        // Arrival times have millisecond resolution: an event stored after the read but in
        // the same millisecond as `last_arrival` would not make the day look dirty. Then the
        // day is left unmarked (it stays dirty and is archived again).
        let after = raw.days().await?.into_iter().find(|s| s.day == day);
        let marked = !after.is_some_and(|s| s.last_arrival_ms <= last_arrival && s.events > rows);
        if marked {
            raw.mark_archived(day, last_arrival).await?;
        } else {
            tracing::warn!(%day, "events arrived within the archive's snapshot millisecond; the day stays dirty");
        }
        tracing::info!(%day, rows, bytes, %location, "raw day archived");
        Ok(ArchiveOutcome {
            day,
            location: location.to_string(),
            rows,
            bytes,
            archived_arrival_ms: last_arrival,
            marked,
        })
    }

    /// Steps 2 and 3: writes `tmp` and reads it back in full. Returns `(rows, bytes)`.
    async fn write_and_check(
        &self,
        raw: &dyn RawStore,
        day: Day,
        last_arrival: i64,
        catalog_events: u64,
        tmp: &ObjectPath,
    ) -> Result<(u64, u64), ArchiveError> {
        let schema = schema();
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_key_value_metadata(Some(vec![
                KeyValue::new("tidemark.day".into(), day.to_string()),
                KeyValue::new("tidemark.last_arrival_ms".into(), last_arrival.to_string()),
            ]))
            .build();
        let out = BufWriter::new(Arc::clone(&self.store), tmp.clone());
        let mut writer = AsyncArrowWriter::try_new(out, Arc::clone(&schema), Some(props))?;
        let rows = match self.copy_day(raw, day, &schema, &mut writer).await {
            Ok(rows) => rows,
            Err(e) => {
                // Abandon the unfinished upload (its parts are not an object yet).
                if let Err(error) = writer.into_inner().abort().await {
                    tracing::debug!(%day, %error, "aborting the archive upload failed");
                }
                return Err(e);
            }
        };
        writer.close().await?;
        if rows < catalog_events {
            return Err(ArchiveError::Incomplete {
                day,
                read: rows,
                catalog: catalog_events,
            });
        }

        let size = self.store.head(tmp).await?.size;
        let (meta_rows, read_rows) = self.read_back(tmp, size).await?;
        for found in [meta_rows, read_rows] {
            if found != rows {
                return Err(ArchiveError::RowCount {
                    location: tmp.to_string(),
                    expected: rows,
                    found,
                });
            }
        }
        Ok((rows, size))
    }

    /// Streams the day from the raw tier into `writer`; returns the number of events.
    async fn copy_day(
        &self,
        raw: &dyn RawStore,
        day: Day,
        schema: &SchemaRef,
        writer: &mut AsyncArrowWriter<BufWriter>,
    ) -> Result<u64, ArchiveError> {
        let mut rows: u64 = 0;
        let mut cursor = Some(0);
        while let Some(after) = cursor {
            let (events, next) = raw.read_chunk(day, after, self.chunk).await?;
            if !events.is_empty() {
                writer.write(&to_batch(schema, &events)?).await?;
                rows += events.len() as u64;
            }
            cursor = next;
        }
        Ok(rows)
    }

    /// Decodes the whole object: `(rows in its footer, rows decoded)`.
    async fn read_back(
        &self,
        location: &ObjectPath,
        size: u64,
    ) -> Result<(u64, u64), ArchiveError> {
        let reader = StoreReader {
            store: Arc::clone(&self.store),
            location: location.clone(),
            size,
        };
        let builder = ParquetRecordBatchStreamBuilder::new(reader).await?;
        let meta_rows = builder.metadata().file_metadata().num_rows().max(0) as u64;
        let mut stream = builder.build()?;
        let mut decoded = 0u64;
        while let Some(batch) = stream.next().await {
            decoded += batch?.num_rows() as u64;
        }
        Ok((meta_rows, decoded))
    }

    /// Rows according to the object's footer (reads only the footer).
    async fn footer_rows(&self, location: &ObjectPath) -> Result<u64, ArchiveError> {
        Ok(self.footer(location).await?.0)
    }

    /// The rows of the object at `location` and the `tidemark.last_arrival_ms` it was
    /// written as of, from its Parquet footer.
    async fn footer(&self, location: &ObjectPath) -> Result<(u64, Option<i64>), ArchiveError> {
        let size = self.store.head(location).await?.size;
        let mut reader = StoreReader {
            store: Arc::clone(&self.store),
            location: location.clone(),
            size,
        };
        let meta = reader.get_metadata(None).await?;
        let file = meta.file_metadata();
        let arrival = file
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|k| k.key == "tidemark.last_arrival_ms"))
            .and_then(|k| k.value.as_deref())
            .and_then(|v| v.parse().ok());
        Ok((file.num_rows().max(0) as u64, arrival))
    }

    /// Whether the day's archive object covers `state` (the day's catalog entry): written as
    /// of at least its marked arrival, with at least its events. False for a day never marked
    /// archived or without an object; the lifecycle checks it before a drop, since an upload
    /// of a node that lost its lease may have replaced the object with an older copy.
    pub async fn covers(&self, state: &DayState) -> Result<bool, ArchiveError> {
        let Some(marked) = state.archived_arrival_ms else {
            return Ok(false);
        };
        match self.footer(&self.day_path(state.day)).await {
            Ok((rows, Some(arrival))) => Ok(arrival >= marked && rows >= state.events),
            Ok((_, None)) => Ok(false),
            Err(ArchiveError::Store(object_store::Error::NotFound { .. })) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes temporary objects an interrupted archive of `day` left behind (best effort).
    async fn remove_stale_temporaries(&self, day: Day) {
        let dir = self.day_dir(day);
        let mut listing = self.store.list(Some(&dir));
        while let Some(item) = listing.next().await {
            match item {
                Ok(meta)
                    if meta
                        .location
                        .filename()
                        .is_some_and(|f| f.starts_with(TMP_PREFIX)) =>
                {
                    if let Err(error) = self.store.delete(&meta.location).await {
                        tracing::warn!(%day, %error, "could not delete a stale temporary archive object");
                    }
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::debug!(%day, %error, "listing the archive folder failed");
                    return;
                }
            }
        }
    }
}

fn external(e: object_store::Error) -> ParquetError {
    ParquetError::External(Box::new(e))
}

/// Parquet's async reader over one object (ranged gets).
#[derive(Debug)]
struct StoreReader {
    store: Arc<dyn ObjectStore>,
    location: ObjectPath,
    size: u64,
}

impl AsyncFileReader for StoreReader {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        self.store
            .get_range(&self.location, range)
            .map_err(external)
            .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.store
                .get_ranges(&self.location, &ranges)
                .await
                .map_err(external)
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let size = self.size;
            let meta = ParquetMetaDataReader::new()
                .load_and_finish(&mut *self, size)
                .await?;
            Ok(Arc::new(meta))
        }
        .boxed()
    }
}
