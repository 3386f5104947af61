//! Shared by the archive and lifecycle tests: an object store with injected faults, and a
//! Parquet decoder written independently of `tidemark_events::archive`.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::fmt;
use std::sync::{Arc, Mutex};

use arrow_array::{Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use tidemark_events::Event;

/// What the [`FaultyStore`] does wrong.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Nothing: a plain pass-through.
    None,
    /// Every write fails.
    FailWrites,
    /// Writes report success but are lost.
    LoseWrites,
    /// Every read first cuts the object to half its size.
    Truncate,
    /// Every read first replaces the object with these bytes (an old version).
    Stale(Bytes),
}

/// A pass-through object store with a switchable [`Fault`].
#[derive(Debug)]
pub struct FaultyStore {
    pub inner: Arc<dyn ObjectStore>,
    scratch: InMemory,
    fault: Mutex<Fault>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            scratch: InMemory::new(),
            fault: Mutex::new(Fault::None),
        })
    }

    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    fn fault(&self) -> Fault {
        self.fault.lock().unwrap().clone()
    }

    fn injected() -> object_store::Error {
        object_store::Error::Generic {
            store: "faulty",
            source: "injected write failure".into(),
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        match self.fault() {
            Fault::FailWrites => Err(Self::injected()),
            Fault::LoseWrites => self.scratch.put_opts(location, payload, opts).await,
            _ => self.inner.put_opts(location, payload, opts).await,
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        match self.fault() {
            Fault::FailWrites => Err(Self::injected()),
            Fault::LoseWrites => self.scratch.put_multipart_opts(location, opts).await,
            _ => self.inner.put_multipart_opts(location, opts).await,
        }
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        match self.fault() {
            Fault::Truncate => {
                let bytes = self.inner.get(location).await?.bytes().await?;
                if bytes.len() > 16 {
                    let half = bytes.slice(0..bytes.len() / 2);
                    self.inner.put(location, half.into()).await?;
                }
            }
            Fault::Stale(old) => {
                self.inner.put(location, old.into()).await?;
            }
            _ => {}
        }
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        match self.fault() {
            Fault::FailWrites => Err(Self::injected()),
            _ => self.inner.copy_opts(from, to, options).await,
        }
    }
}

/// Now, Unix ms (the wall clock: InfluxDB's retention runs on it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Decodes archived rows back into events, column by column (independent of the archive's
/// own encoder).
pub fn events_of(batch: &RecordBatch) -> Vec<Event> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let time = col("time_ms")
        .as_any()
        .downcast_ref::<TimestampMillisecondArray>()
        .expect("time_ms is a ms timestamp");
    let ints = |name: &str| {
        col(name)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap_or_else(|| panic!("{name} is Int64"))
            .clone()
    };
    let strs = |name: &str| {
        col(name)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap_or_else(|| panic!("{name} is Utf8"))
            .clone()
    };
    let (kind, listing, user, device, session, page, count, fields) = (
        strs("kind"),
        ints("listing_id"),
        strs("user_id"),
        strs("device_id"),
        strs("session_id"),
        strs("page_url"),
        ints("count"),
        strs("fields"),
    );
    let opt_s = |a: &StringArray, i: usize| (!a.is_null(i)).then(|| a.value(i).to_owned());
    (0..batch.num_rows())
        .map(|i| Event {
            time_ms: time.value(i),
            kind: kind.value(i).to_owned(),
            listing_id: (!listing.is_null(i)).then(|| listing.value(i)),
            user_id: opt_s(&user, i),
            device_id: opt_s(&device, i),
            session_id: opt_s(&session, i),
            page_url: opt_s(&page, i),
            count: count.value(i),
            fields: serde_json::from_str(fields.value(i)).expect("fields are a JSON object"),
        })
        .collect()
}

/// All rows of a Parquet file on disk, with the parquet crate's own (sync) reader.
pub fn read_parquet_file(path: &std::path::Path) -> Vec<Event> {
    let file = std::fs::File::open(path).expect("archive file exists");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a Parquet file")
        .build()
        .expect("reader");
    reader
        .flat_map(|b| events_of(&b.expect("batch decodes")))
        .collect()
}

/// An event with every field set.
pub fn full(kind: &str, time_ms: i64, listing: i64, session: &str, page: &str) -> Event {
    let mut e = Event::new(kind, time_ms);
    e.listing_id = Some(listing);
    e.user_id = Some(format!("u-{session}"));
    e.device_id = Some("d1".into());
    e.session_id = Some(session.into());
    e.page_url = Some(page.into());
    e
}
