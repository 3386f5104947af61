//! The raw archive: Parquet through object_store, read back and checked before a day counts as
//! archived (DESIGN.md part C "Archive", principle 2).
//!
//! The tests over a raw tier run on the embedded SQLite tier and on a real InfluxDB started by
//! the test (a retention policy of 10 years: the tests' day is a fixed date).

mod common;

use std::sync::Arc;

use arrow_schema::{DataType, TimeUnit};
use common::{Fault, FaultyStore, full, read_parquet_file};
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use parquet::basic::Compression;
use parquet::file::reader::{FileReader, SerializedFileReader};
use tidemark_core::day::Day;
use tidemark_events::archive::{ArchiveError, RawArchive};
use tidemark_events::testing::{InfluxServer, S3Server};
use tidemark_events::{DayState, Event, InfluxRaw, RawStore, SqliteRaw};

const DAY: &str = "2026-03-10";
/// 2026-03-10T09:30:00Z
const T: i64 = 1_773_135_000_000;
/// Arrival of the first batch: 2026-03-11T02:00:00Z.
const ARRIVAL: i64 = 1_773_194_400_000;

fn day() -> Day {
    Day::parse(DAY).unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Embedded,
    Production,
}

struct Setup {
    _dir: tempfile::TempDir,
    _influx: Option<InfluxServer>,
    raw: Arc<dyn RawStore>,
    archive_dir: std::path::PathBuf,
    store: Arc<FaultyStore>,
}

async fn setup(mode: Mode) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (raw, influx): (Arc<dyn RawStore>, _) = match mode {
        Mode::Embedded => (
            Arc::new(SqliteRaw::open(&dir.path().join("raw.db")).unwrap()),
            None,
        ),
        Mode::Production => {
            let influx = InfluxServer::start().unwrap();
            let raw = InfluxRaw::connect(
                &format!("{}?retention=3650d", influx.url("archive")),
                &dir.path().join("catalog.db"),
            )
            .await
            .unwrap();
            (Arc::new(raw), Some(influx))
        }
    };
    let archive_dir = dir.path().join("archive");
    std::fs::create_dir_all(&archive_dir).unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(LocalFileSystem::new_with_prefix(&archive_dir).unwrap());
    Setup {
        _dir: dir,
        _influx: influx,
        raw,
        archive_dir,
        store: FaultyStore::new(local),
    }
}

impl Setup {
    fn archive(&self) -> RawArchive {
        let store: Arc<dyn ObjectStore> = Arc::clone(&self.store) as Arc<dyn ObjectStore>;
        RawArchive::new(store, ObjectPath::default()).with_chunk_size(2)
    }
    fn file(&self) -> std::path::PathBuf {
        self.archive_dir
            .join("events")
            .join(format!("day={DAY}"))
            .join("events.parquet")
    }
    async fn state(&self) -> DayState {
        self.raw
            .days()
            .await
            .unwrap()
            .into_iter()
            .find(|s| s.day == day())
            .unwrap()
    }
    fn files_in_day_dir(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.file().parent().unwrap())
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// Nulls, identical timestamps (even identical events), non-ASCII, counts and extra fields.
fn tricky_events() -> Vec<Event> {
    let a = full("view", T, 48213, "s1", "/item/48213?q=café");
    let b = a.clone(); // the very same event twice: two rows
    let mut c = Event::new("click", T); // same timestamp, every field null
    c.count = 3;
    let mut d = full("contact", T + 1, -7, "séance-☃", "/物件/𝄞 ü");
    d.user_id = Some("Željko Đurić".into());
    d.device_id = None;
    d.fields.insert("email".into(), "ana@example.com".into());
    d.fields.insert("bot".into(), true.into());
    let mut e = Event::new("email_open", T + 86_399_999 - T % 86_400_000); // last ms of the day
    e.fields.insert("mailing_id".into(), 12.into());
    e.fields
        .insert("ua_class".into(), "mobile \"quoted\"".into());
    vec![a, b, c, d, e]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_keeps_every_row_and_marks_the_day() {
    round_trip_keeps_every_row_and_marks_the_day_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_keeps_every_row_and_marks_the_day_on_influxdb() {
    round_trip_keeps_every_row_and_marks_the_day_in(Mode::Production).await;
}

async fn round_trip_keeps_every_row_and_marks_the_day_in(mode: Mode) {
    let s = setup(mode).await;
    let events = tricky_events();
    let mut other_day = Event::new("view", T + 86_400_000);
    other_day.listing_id = Some(1);
    let mut batch = events.clone();
    batch.push(other_day);
    s.raw.append(batch, ARRIVAL).await.unwrap();

    let outcome = s.archive().archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(outcome.day, day());
    assert_eq!(outcome.rows, 5);
    assert_eq!(outcome.location, "events/day=2026-03-10/events.parquet");
    assert_eq!(outcome.archived_arrival_ms, ARRIVAL);
    assert!(outcome.marked);
    assert_eq!(outcome.bytes, std::fs::metadata(s.file()).unwrap().len());

    // Read back with parquet's own reader: the same rows, in arrival order.
    assert_eq!(read_parquet_file(&s.file()), events);
    assert_eq!(
        read_parquet_file(&s.file()),
        s.raw.day_events(day()).await.unwrap()
    );
    // Only the final object is left (the temporary one was renamed).
    assert_eq!(s.files_in_day_dir(), vec!["events.parquet".to_owned()]);

    // Schema, compression and metadata.
    let reader = SerializedFileReader::new(std::fs::File::open(s.file()).unwrap()).unwrap();
    let meta = reader.metadata();
    assert_eq!(meta.file_metadata().num_rows(), 5);
    assert!(matches!(
        meta.row_group(0).column(0).compression(),
        Compression::ZSTD(_)
    ));
    let kv = meta.file_metadata().key_value_metadata().unwrap();
    let get = |k: &str| {
        kv.iter()
            .find(|e| e.key == k)
            .and_then(|e| e.value.clone())
            .unwrap()
    };
    assert_eq!(get("tidemark.day"), DAY);
    assert_eq!(get("tidemark.last_arrival_ms"), ARRIVAL.to_string());
    let arrow_schema = tidemark_events::archive::schema();
    assert_eq!(
        arrow_schema.field_with_name("time_ms").unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
    );

    let st = s.state().await;
    assert_eq!(st.archived_arrival_ms, Some(ARRIVAL));
    assert!(st.archive_current());
    // The other day is untouched.
    let other = s.raw.days().await.unwrap()[1];
    assert_eq!(other.archived_arrival_ms, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_events_are_archived_again_replacing_the_object() {
    late_events_are_archived_again_replacing_the_object_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_events_are_archived_again_replacing_the_object_on_influxdb() {
    late_events_are_archived_again_replacing_the_object_in(Mode::Production).await;
}

async fn late_events_are_archived_again_replacing_the_object_in(mode: Mode) {
    let s = setup(mode).await;
    let events = tricky_events();
    s.raw.append(events[..2].to_vec(), ARRIVAL).await.unwrap();
    s.archive().archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(read_parquet_file(&s.file()).len(), 2);

    s.raw
        .append(events[2..].to_vec(), ARRIVAL + 60_000)
        .await
        .unwrap();
    assert!(!s.state().await.archive_current());
    let outcome = s.archive().archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(outcome.rows, 5);
    assert_eq!(outcome.archived_arrival_ms, ARRIVAL + 60_000);
    assert_eq!(read_parquet_file(&s.file()), events);
    assert!(s.state().await.archive_current());
    assert_eq!(s.files_in_day_dir(), vec!["events.parquet".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_back_fails_the_row_count_check_and_marks_nothing() {
    a_stale_read_back_fails_the_row_count_check_and_marks_nothing_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_back_fails_the_row_count_check_and_marks_nothing_on_influxdb() {
    a_stale_read_back_fails_the_row_count_check_and_marks_nothing_in(Mode::Production).await;
}

async fn a_stale_read_back_fails_the_row_count_check_and_marks_nothing_in(mode: Mode) {
    let s = setup(mode).await;
    let events = tricky_events();
    s.raw.append(events[..3].to_vec(), ARRIVAL).await.unwrap();
    s.archive().archive_day(&*s.raw, day()).await.unwrap();
    let old = bytes::Bytes::from(std::fs::read(s.file()).unwrap());

    s.raw
        .append(events[3..].to_vec(), ARRIVAL + 1_000)
        .await
        .unwrap();
    // The store serves the old version of every object it is asked for.
    s.store.set(Fault::Stale(old));
    let err = s.archive().archive_day(&*s.raw, day()).await.unwrap_err();
    match err {
        ArchiveError::RowCount {
            expected, found, ..
        } => assert_eq!((expected, found), (5, 3)),
        other => panic!("expected a row-count mismatch, got {other:?}"),
    }
    let st = s.state().await;
    assert_eq!(st.archived_arrival_ms, Some(ARRIVAL));
    assert!(!st.archive_current());

    s.store.set(Fault::None);
    let outcome = s.archive().archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(outcome.rows, 5);
    assert_eq!(read_parquet_file(&s.file()), events);
    assert_eq!(s.state().await.archived_arrival_ms, Some(ARRIVAL + 1_000));
    assert_eq!(s.files_in_day_dir(), vec!["events.parquet".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_truncated_or_failed_writes_are_never_marked_archived() {
    lost_truncated_or_failed_writes_are_never_marked_archived_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_truncated_or_failed_writes_are_never_marked_archived_on_influxdb() {
    lost_truncated_or_failed_writes_are_never_marked_archived_in(Mode::Production).await;
}

async fn lost_truncated_or_failed_writes_are_never_marked_archived_in(mode: Mode) {
    for fault in [Fault::LoseWrites, Fault::Truncate, Fault::FailWrites] {
        let s = setup(mode).await;
        s.raw.append(tricky_events(), ARRIVAL).await.unwrap();
        s.store.set(fault.clone());
        let err = s.archive().archive_day(&*s.raw, day()).await.unwrap_err();
        assert!(
            matches!(err, ArchiveError::Store(_) | ArchiveError::Parquet(_)),
            "{fault:?}: {err:?}"
        );
        assert_eq!(s.state().await.archived_arrival_ms, None, "{fault:?}");
        assert!(!s.file().exists(), "{fault:?}");

        // Healthy again: archived, and no temporary object is left behind.
        s.store.set(Fault::None);
        assert_eq!(
            s.archive().archive_day(&*s.raw, day()).await.unwrap().rows,
            5
        );
        assert_eq!(s.state().await.archived_arrival_ms, Some(ARRIVAL));
        assert_eq!(s.files_in_day_dir(), vec!["events.parquet".to_owned()]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_unknown_days_are_refused() {
    dropped_and_unknown_days_are_refused_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_and_unknown_days_are_refused_on_influxdb() {
    dropped_and_unknown_days_are_refused_in(Mode::Production).await;
}

async fn dropped_and_unknown_days_are_refused_in(mode: Mode) {
    let s = setup(mode).await;
    s.raw.append(tricky_events(), ARRIVAL).await.unwrap();
    s.archive().archive_day(&*s.raw, day()).await.unwrap();
    let before = std::fs::read(s.file()).unwrap();
    s.raw.mark_rolled_up(day(), ARRIVAL).await.unwrap();
    assert!(s.raw.drop_day(day(), ARRIVAL + 1).await.unwrap());
    assert!(matches!(
        s.archive().archive_day(&*s.raw, day()).await,
        Err(ArchiveError::Dropped(d)) if d == day()
    ));
    // The archive of the dropped day is left as it was.
    assert_eq!(std::fs::read(s.file()).unwrap(), before);
    assert!(matches!(
        s.archive().archive_day(&*s.raw, day().plus(5)).await,
        Err(ArchiveError::UnknownDay(d)) if d == day().plus(5)
    ));
}

#[tokio::test]
async fn open_accepts_a_directory_a_file_url_and_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let raw = SqliteRaw::open(&dir.path().join("raw.db")).unwrap();
    raw.append(tricky_events(), ARRIVAL).await.unwrap();
    let default_dir = dir.path().join("default");
    let url_dir = dir.path().join("by-url");
    let plain_dir = dir.path().join("plain");
    let file_url = format!("file://{}", url_dir.display());
    for (url, root) in [
        (None, &default_dir),
        (Some(""), &default_dir),
        (Some(file_url.as_str()), &url_dir),
        (Some(plain_dir.to_str().unwrap()), &plain_dir),
    ] {
        let archive = RawArchive::open(url, &default_dir).unwrap();
        assert_eq!(archive.archive_day(&raw, day()).await.unwrap().rows, 5);
        let file = root.join("events/day=2026-03-10/events.parquet");
        assert_eq!(read_parquet_file(&file), tricky_events(), "{url:?}");
    }
    assert!(matches!(
        RawArchive::open(Some("nosuchscheme://x/y"), &default_dir),
        Err(ArchiveError::BadUrl { .. })
    ));
    // An S3 URL is understood (nothing is contacted until the first request).
    let s3 = RawArchive::open(Some("s3://bucket/some/prefix"), &default_dir).unwrap();
    assert_eq!(
        s3.day_path(day()).to_string(),
        "some/prefix/events/day=2026-03-10/events.parquet"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_day_streams_over_many_chunks_and_batches() {
    a_larger_day_streams_over_many_chunks_and_batches_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_day_streams_over_many_chunks_and_batches_on_influxdb() {
    a_larger_day_streams_over_many_chunks_and_batches_in(Mode::Production).await;
}

async fn a_larger_day_streams_over_many_chunks_and_batches_in(mode: Mode) {
    let s = setup(mode).await;
    let n = 60_000i64;
    let events: Vec<Event> = (0..n)
        .map(|i| {
            let mut e = full(
                ["view", "click", "contact"][(i % 3) as usize],
                T + i % 977,
                i % 1_000,
                &format!("s{}", i % 4_000),
                &format!("/item/{}", i % 1_000),
            );
            if i % 7 == 0 {
                e.session_id = None;
            }
            e
        })
        .collect();
    for part in events.chunks(20_000) {
        s.raw.append(part.to_vec(), ARRIVAL).await.unwrap();
    }
    let archive = RawArchive::new(
        Arc::clone(&s.store) as Arc<dyn ObjectStore>,
        ObjectPath::default(),
    );
    let outcome = archive.archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(outcome.rows, n as u64);
    // The archive holds the day in the raw tier's own order (SQLite: arrival; InfluxDB: time)
    // and every event of it.
    let archived = read_parquet_file(&s.file());
    assert_eq!(archived, s.raw.day_events(day()).await.unwrap());
    let key = |e: &Event| (e.time_ms, serde_json::to_string(e).unwrap());
    let (mut a, mut b) = (archived, events);
    a.sort_by_cached_key(key);
    b.sort_by_cached_key(key);
    assert_eq!(a, b);
}

/// The archive on a real S3-compatible server, through the `s3://bucket/prefix` URL and the
/// options a user sets (`AWS_ENDPOINT`, keys, region): the day's Parquet object reads back
/// through S3 with every event, under the partitioned key, and the day is marked archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_archive_round_trips_parquet() {
    an_s3_archive_round_trips_parquet_in(Mode::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_archive_round_trips_parquet_on_influxdb() {
    an_s3_archive_round_trips_parquet_in(Mode::Production).await;
}

async fn an_s3_archive_round_trips_parquet_in(mode: Mode) {
    let s3 = S3Server::start().unwrap();
    s3.create_bucket("tidemark-archive").unwrap();
    let s = setup(mode).await;
    s.raw.append(tricky_events(), ARRIVAL).await.unwrap();
    let archive = RawArchive::open_with_options(
        Some("s3://tidemark-archive/raw"),
        &s.archive_dir,
        s3.options(),
    )
    .unwrap();
    let outcome = archive.archive_day(&*s.raw, day()).await.unwrap();
    assert_eq!(outcome.rows, 5);
    let key = archive.day_path(day());
    assert_eq!(key.as_ref(), "raw/events/day=2026-03-10/events.parquet");
    let bytes = archive
        .store()
        .get(&key)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let copy = s.archive_dir.join("from-s3.parquet");
    std::fs::write(&copy, &bytes).unwrap();
    assert_eq!(
        read_parquet_file(&copy),
        s.raw.day_events(day()).await.unwrap()
    );
    assert_eq!(s.state().await.archived_arrival_ms, Some(ARRIVAL));
}

/// An upload the S3 server refuses (no such bucket) or never takes (the server is down) is
/// an error: nothing is marked archived, so the day may not be dropped, and every event is
/// still in the raw tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_or_interrupted_s3_upload_marks_nothing_and_drops_nothing() {
    let mut s3 = S3Server::start().unwrap();
    let s = setup(Mode::Embedded).await;
    s.raw.append(tricky_events(), ARRIVAL).await.unwrap();
    let open = |bucket: &str| {
        RawArchive::open_with_options(
            Some(&format!("s3://{bucket}/raw")),
            &s.archive_dir,
            s3.options(),
        )
        .unwrap()
    };
    let refused = open("no-such-bucket")
        .archive_day(&*s.raw, day())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("NoSuchBucket"), "{refused}");
    s3.create_bucket("tidemark-archive").unwrap();
    let archive = open("tidemark-archive");
    s3.stop();
    let down = archive.archive_day(&*s.raw, day()).await.unwrap_err();
    assert!(
        matches!(down, ArchiveError::Store(_) | ArchiveError::Parquet(_)),
        "{down:?}"
    );
    let state = s.state().await;
    assert_eq!(state.archived_arrival_ms, None);
    let windows = tidemark_events::lifecycle::Windows::of(
        &tidemark_events::EventsConfig::default(),
        tidemark_events::calendar::Calendar::utc(),
    );
    assert!(
        !windows.may_drop(&state, i64::MAX / 2),
        "a day not archived is never dropped"
    );
    assert_eq!(s.raw.day_events(day()).await.unwrap().len(), 5);
}
