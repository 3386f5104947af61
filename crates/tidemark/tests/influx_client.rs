//! Existing InfluxDB clients work unchanged. The official Python `influxdb-client`
//! (installed by scripts/test) writes to Tidemark's `/api/v2/write` with `Authorization: Token`,
//! with ms precision and with the default ns precision, escaping included; then a bad point is
//! refused with a 400 naming it and nothing of its batch is stored.

mod common;

use common::*;

const SCRIPT: &str = r#"
import sys
from influxdb_client import InfluxDBClient, Point, WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException

url, key = sys.argv[1], sys.argv[2]
with InfluxDBClient(url=url, token=key, org="marketplace") as client:
    w = client.write_api(write_options=SYNCHRONOUS)
    # The seed's own writer: identifiers as string fields, the kind as the one tag, ms precision.
    p = (Point("listing_event").tag("event", "view")
         .field("listing_id", "48213").field("user_id", "u_9f2c").field("device_id", "d_71ab")
         .field("session_id", 's "one", with, commas = and spaces').field("page_url", "/item/48213")
         .field("count", 1).time(1717430400123, WritePrecision.MS))
    w.write(bucket="events", record=p, write_precision=WritePrecision.MS)
    # Same millisecond, same tags: a second event, never merged.
    w.write(bucket="events", record=p, write_precision=WritePrecision.MS)
    # Default precision is ns.
    w.write(bucket="events", record="listing_event,event=click listing_id=\"7\",count=1i 1717430400123456789")
    try:
        w.write(bucket="events", record=[
            "listing_event,event=view listing_id=\"8\",count=1i 1717430400000000000",
            "listing_event,event=view,user_id=u1 count=1i 1717430400000000000",
        ])
        print("NO-ERROR")
    except ApiException as e:
        print("STATUS", e.status)
        print("BODY", e.body)
"#;

/// One raw row: time (ms), kind, listing_id, session_id, count.
type RawRow = (i64, String, Option<i64>, Option<String>, i64);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_client_writes_line_protocol() {
    official_python_client_writes_line_protocol_in(Mode::Embedded).await;
}

/// Through Tidemark into a real InfluxDB: the client's two points with the same series and
/// millisecond are two events there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_client_writes_line_protocol_through_to_influxdb() {
    official_python_client_writes_line_protocol_in(Mode::Production).await;
}

async fn official_python_client_writes_line_protocol_in(mode: Mode) {
    // The events are of 2024-06-03: a raw window and a retention policy long enough to take
    // and keep them.
    let server =
        TestServer::start_in_with(mode, &[("TIDEMARK_EVENTS__RAW_RETENTION", "3650d")], |e| {
            vec![(
                "TIDEMARK_EVENTS__RAW".into(),
                format!("{}?retention=3650d", e.influx.url("tidemark")),
            )]
        })
        .await;
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT, &server.base, KEY])
        .output()
        .expect("python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "influxdb-client failed (run scripts/test to install it):\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("STATUS 400"), "{stdout}");
    assert!(
        stdout.contains("`user_id` is a field, never a tag"),
        "{stdout}"
    );

    let rows = match &server.engines {
        None => sqlite_rows(&server),
        Some(e) => {
            // Read back through Tidemark's own InfluxDB raw tier, from a second process's view.
            let raw = tidemark_events::InfluxRaw::connect(
                &format!("{}?retention=3650d", e.influx.url("tidemark")),
                &server.dir.join("events/influx-catalog.db"),
            )
            .await
            .unwrap();
            let day = tidemark_core::day::Day::parse("2024-06-03").unwrap();
            use tidemark_events::RawStore;
            raw.day_events(day)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.time_ms, e.kind, e.listing_id, e.session_id, e.count))
                .collect()
        }
    };
    let session = Some(r#"s "one", with, commas = and spaces"#.to_owned());
    assert_eq!(
        rows,
        vec![
            (
                1_717_430_400_123,
                "view".into(),
                Some(48213),
                session.clone(),
                1
            ),
            (1_717_430_400_123, "view".into(), Some(48213), session, 1),
            (1_717_430_400_123, "click".into(), Some(7), None, 1),
        ],
        "the refused batch stored nothing (no listing 8)"
    );
    server.cleanup().await;
}

fn sqlite_rows(server: &TestServer) -> Vec<RawRow> {
    let conn = rusqlite::Connection::open(server.dir.join("events/raw.db")).unwrap();
    let rows: Vec<RawRow> = conn
        .prepare(
            "SELECT time_ms, kind, listing_id, session_id, count FROM raw_20240603 ORDER BY seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows
}
