//! A 10,000-row gather from an object store, eagerio against object_store's own ways.
//!
//! ```sh
//! cargo run --release -p eagerio-object-store --example remote_gather
//! ```
//!
//! Stores: `ThrottledStore(InMemory)` with `EAGERIO_LATENCY_MS` (2) per GET and
//! `EAGERIO_NS_PER_BYTE` (0, then 10: about 100 MB/s per request stream), and `moto_server` when
//! it is installed (skipped with a note otherwise). Methods, over the same random rows:
//! - `eagerio`: its defaults (the gap tuned from the GETs' measured cost), then fixed gap bounds
//!   of 0, 64 KiB, 256 KiB and 1 MiB at 64 GETs in flight (the default),
//!   then 16 and 256 GETs in flight and GETs of at most 1 MiB (not 8) at the default 256 KiB gap;
//! - `get_ranges`: object_store's default `ObjectStore::get_ranges`, which S3, GCS, Azure and HTTP
//!   stores use: ranges closer than 1 MiB merged, 10 GETs at a time (`coalesce_ranges` over
//!   `get_range`). On the `ThrottledStore` this is measured by calling that function, because
//!   `ThrottledStore::get_ranges` sleeps once per call, however many ranges: that row is shown
//!   too, marked, and models no remote store;
//! - `join_all(get_range)`: one GET per row, all at once.
//!
//! Every method's bytes are checked against the table before its times count; a method whose
//! GETs fail (after the store's retries: on moto, at most 60 s) is reported as failed, with the
//! store's error. Requests are counted by a wrapper around the store. moto runs no gap-0 row: it
//! reads the whole object for every range GET, so 10,000 unmerged GETs take minutes. Environment: `EAGERIO_ROWS` (10000), `EAGERIO_ROW_SIZE`
//! (4096), `EAGERIO_TABLE_MB` (1024; moto: `EAGERIO_MOTO_TABLE_MB`, 64), `EAGERIO_RUNS` (3,
//! median).

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    ops::Range,
    process::{Child, Command, Stdio},
    sync::{atomic::Ordering, Arc},
    time::{Duration, Instant},
};

use bytes::Bytes;
use eagerio_core::{DataSink, RowLayout, SinkOptions};
use eagerio_object_store::{ObjectStoreEngine, ObjectStoreOptions, ObjectStoreWriter, WriterOptions};
use object_store::{
    aws::AmazonS3Builder,
    coalesce_ranges,
    memory::InMemory,
    path::Path,
    throttle::{ThrottleConfig, ThrottledStore},
    ObjectStore, ObjectStoreExt, PutPayload, RetryConfig, OBJECT_STORE_COALESCE_DEFAULT,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[path = "../tests/support/counting.rs"]
mod counting;

use counting::Counting;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Case<'a> {
    store: &'a Arc<Counting>,
    loc: &'a Path,
    table: &'a [u8],
    row: u64,
    ids: &'a [u64],
    runs: usize,
}

impl Case<'_> {
    fn want(&self) -> Vec<u8> {
        let r = self.row as usize;
        self.ids.iter().flat_map(|&i| self.table[i as usize * r..(i as usize + 1) * r].to_vec()).collect()
    }

    fn ranges(&self) -> Vec<Range<u64>> {
        self.ids.iter().map(|&i| i * self.row..(i + 1) * self.row).collect()
    }

    /// Checks the bytes once, then times `runs` runs; returns (median ms, requests per run), or
    /// why the method failed (a store error: the method gets no time). Wrong bytes panic.
    async fn measure<F, Fut>(&self, mut f: F) -> Result<(f64, u64), String>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, String>>,
    {
        let got = f().await?;
        assert!(got == self.want(), "wrong bytes");
        let mut times = Vec::new();
        let before = self.store.gets.load(Ordering::Relaxed);
        for _ in 0..self.runs {
            let t = Instant::now();
            let got = f().await?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(got.len(), self.ids.len() * self.row as usize);
        }
        let reqs = (self.store.gets.load(Ordering::Relaxed) - before) / self.runs as u64;
        times.sort_by(f64::total_cmp);
        Ok((times[times.len() / 2], reqs))
    }
}

fn concat(parts: Vec<Bytes>) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|b| b.len()).sum());
    for p in parts {
        out.extend_from_slice(&p);
    }
    out
}

/// (max_gap, GETs in flight, largest GET): the gap sweep at the default concurrency and request
/// size (64, 8 MiB), then concurrency and request size at the default gap (256 KiB).
const SWEEP: [(u64, usize, u64); 8] = [
    (0, 64, 8 << 20),
    (64 << 10, 64, 8 << 20),
    (256 << 10, 64, 8 << 20),
    (1 << 20, 64, 8 << 20),
    (256 << 10, 16, 8 << 20),
    (256 << 10, 256, 8 << 20),
    (256 << 10, 64, 1 << 20),
    (256 << 10, 256, 1 << 20),
];

/// One table row: the method, then (median ms, requests per run) or why it failed.
type Row = (String, Result<(f64, u64), String>);

async fn run_all(label: &str, case: &Case<'_>, sweep: &[(u64, usize, u64)], throttled: bool) {
    let row = case.row;
    let mut results: Vec<Row> = Vec::new();
    let dyn_store: Arc<dyn ObjectStore> = case.store.clone();
    // The defaults, with the gap tuned from the GETs (the checked pass trains it), then the sweep
    // with fixed gaps.
    let fixed = sweep.iter().map(|&(gap, concurrency, max_request)| (Some(gap), concurrency, max_request));
    for (gap, concurrency, max_request) in std::iter::once((None, 64, 8 << 20)).chain(fixed) {
        let opts = match gap {
            None => ObjectStoreOptions::default(),
            Some(max_gap) => {
                ObjectStoreOptions::default().max_gap(max_gap).tune_gap(false).depth(concurrency).max_read(max_request)
            }
        };
        let table = ObjectStoreEngine::with_len(dyn_store.clone(), case.loc.clone(), case.table.len() as u64, opts)
            .unwrap()
            .rows(RowLayout { base: 0, row_size: row, rows: None })
            .unwrap();
        let res = case
            .measure(|| async {
                let fut = table.gather(case.ids).map_err(|e| e.to_string())?;
                Ok(fut.await.map_err(|e| e.to_string())?.to_vec())
            })
            .await;
        let name = match gap {
            None => match table.source().engine().tuned_gap() {
                Some(g) => format!("eagerio defaults: gap tuned to {} KiB, 64 in flight, GETs <= 8 MiB", g >> 10),
                None => "eagerio defaults: gap 256 KiB (GETs too alike to tune), 64 in flight, GETs <= 8 MiB".into(),
            },
            Some(gap) => {
                format!(
                    "eagerio, max_gap {} KiB, {concurrency} in flight, GETs <= {} MiB",
                    gap >> 10,
                    max_request >> 20
                )
            }
        };
        eprintln!("{label}: {name}: {res:?}");
        results.push((name, res));
    }
    let ranges = case.ranges();
    let res = case
        .measure(|| async {
            let store = case.store.clone();
            let fetch = |r: Range<u64>| {
                let store = store.clone();
                async move { store.get_range(case.loc, r).await }
            };
            let parts = coalesce_ranges(&ranges, fetch, OBJECT_STORE_COALESCE_DEFAULT).await;
            Ok(concat(parts.map_err(|e| e.to_string())?))
        })
        .await;
    eprintln!("{label}: get_ranges: {res:?}");
    results.push(("get_ranges (default: 1 MiB merge, 10 at a time)".into(), res));
    if throttled {
        let res = case
            .measure(|| async {
                Ok(concat(case.store.get_ranges(case.loc, &ranges).await.map_err(|e| e.to_string())?))
            })
            .await;
        results.push(("ThrottledStore::get_ranges (one sleep per call)*".into(), res));
    }
    let res = case
        .measure(|| async {
            let futs = ranges.iter().map(|r| case.store.get_range(case.loc, r.clone()));
            let parts: Vec<Bytes> = futures::future::try_join_all(futs).await.map_err(|e| e.to_string())?;
            Ok(concat(parts))
        })
        .await;
    eprintln!("{label}: join_all: {res:?}");
    results.push(("join_all(get_range per row)".into(), res));

    let base = results.iter().find(|r| r.0.starts_with("get_ranges")).and_then(|r| r.1.as_ref().ok()).map(|r| r.0);
    println!("\n{label}");
    println!("| method | requests | median ms | vs get_ranges |");
    println!("|---|---:|---:|---:|");
    for (name, res) in results {
        match (res, base) {
            (Ok((ms, reqs)), Some(base)) => println!("| {name} | {reqs} | {ms:.1} | {:.2}x |", base / ms),
            (Ok((ms, reqs)), None) => println!("| {name} | {reqs} | {ms:.1} | |"),
            (Err(e), _) => println!("| {name} | | failed: {} | |", e.chars().take(160).collect::<String>()),
        }
    }
}

fn table_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

fn row_ids(rows: u64, n: usize, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(0..rows)).collect()
}

struct Moto(Child, u16);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp.lines().next().unwrap_or_default().to_owned())
}

fn start_moto() -> Option<Moto> {
    let port = TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = Command::new("python3")
        .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut m = Moto(child, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    while http(port, "GET", "/").is_err() {
        if Instant::now() > deadline || m.0.try_wait().ok().flatten().is_some() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(m)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n = env("EAGERIO_ROWS", 10_000) as usize;
    let row = env("EAGERIO_ROW_SIZE", 4096);
    let runs = env("EAGERIO_RUNS", 3) as usize;
    let latency = Duration::from_millis(env("EAGERIO_LATENCY_MS", 2));
    let loc = Path::from("table.bin");

    let table = table_bytes((env("EAGERIO_TABLE_MB", 1024) << 20) as usize, 1);
    let rows = table.len() as u64 / row;
    let ids = row_ids(rows, n, 2);
    let mem = InMemory::new();
    mem.put(&loc, PutPayload::from(table.clone())).await.unwrap();
    let mem: Arc<dyn ObjectStore> = Arc::new(mem);
    let per_bytes: Vec<u64> = std::env::var("EAGERIO_NS_PER_BYTE")
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|_| vec![0, 10]);
    for ns in per_bytes {
        let cfg = ThrottleConfig {
            wait_get_per_call: latency,
            wait_get_per_byte: Duration::from_nanos(ns),
            ..Default::default()
        };
        let throttled: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(mem.clone(), cfg));
        let store = Arc::new(Counting::new(throttled, Duration::ZERO));
        let case = Case { store: &store, loc: &loc, table: &table, row, ids: &ids, runs };
        let label = format!(
            "ThrottledStore(InMemory): {latency:?} per GET, {ns} ns/byte; {n} rows of {row} B from a {} MiB table",
            table.len() >> 20
        );
        run_all(&label, &case, &SWEEP, true).await;
    }
    println!("\n* ThrottledStore::get_ranges sleeps once per call for all ranges; no remote store behaves so.");
    drop(table);

    let Some(moto) = start_moto() else {
        println!("\nmoto_server: skipped (`pip install 'moto[server]'` to run it)");
        return;
    };
    assert!(http(moto.1, "PUT", "/bench").unwrap().contains(" 200"));
    let s3: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(format!("http://127.0.0.1:{}", moto.1))
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name("bench")
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .with_virtual_hosted_style_request(false)
            // Give up on a method after a minute, not the default three.
            .with_retry(RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(60), ..Default::default() })
            .build()
            .unwrap(),
    );
    let table = table_bytes((env("EAGERIO_MOTO_TABLE_MB", 64) << 20) as usize, 3);
    let rows = table.len() as u64 / row;
    let ids = row_ids(rows, n, 4);
    eprintln!("moto: uploading {} MiB", table.len() >> 20);
    // One part in flight at a time: moto (Python) slows to a crawl under concurrent 8 MiB parts.
    let opts = WriterOptions::default().sink(SinkOptions::default().max_in_flight_bytes(8 << 20).append_from(0));
    let sink = ObjectStoreWriter::create(s3.clone(), loc.clone(), opts).await.unwrap();
    for chunk in table.chunks(8 << 20) {
        drop(sink.append(Bytes::copy_from_slice(chunk)));
    }
    sink.close().await.unwrap();
    eprintln!("moto: uploaded");
    let store = Arc::new(Counting::new(s3, Duration::ZERO));
    let case = Case { store: &store, loc: &loc, table: &table, row, ids: &ids, runs };
    let label = format!("moto_server (S3 on loopback): {n} rows of {row} B from a {} MiB table", table.len() >> 20);
    // No gap-0 run: moto reads the whole object for every range GET (58 ms each on a 64 MiB
    // object, 5 ms on a 1 MiB one, measured with boto3), so 10,000 unmerged GETs take minutes.
    run_all(&label, &case, &SWEEP[1..], false).await;
}
