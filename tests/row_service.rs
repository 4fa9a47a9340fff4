//! The row service example (`examples/row_service/`) on loopback: concurrent clients get exactly
//! their rows, overload answers 503 with `Retry-After` at once instead of queueing, bad requests
//! get 400s that say why, and the server still answers correctly afterwards.
//!
//! The table is chosen from a URL at run time (`eagerio::open_rows`): a local file, and an object
//! in moto's S3 (with the facade's `object-store` feature), both behind `dyn GatherRows`.
//!
//! The client is a minimal HTTP/1.1 client over `tokio::net::TcpStream` (one request per
//! connection), so the test needs no HTTP client crate. Every request has a deadline: a server
//! that hangs fails the test instead of stalling it.

#[path = "../examples/row_service/app.rs"]
mod app;

use std::{
    net::SocketAddr,
    path::Path,
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

use eagerio::core::fault::{self, Action, Hook, IoKind};
use eagerio::tokio::{TokioEngine, TokioOptions};
use eagerio::RowLayout;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROWS: u64 = 4096;
const ROW_SIZE: u64 = 64;
const DEADLINE: Duration = Duration::from_secs(10);

fn row(r: u64) -> Vec<u8> {
    (0..ROW_SIZE).map(|i| (r.wrapping_mul(131) ^ (i * 7)) as u8 ^ (r >> 8) as u8).collect()
}

fn write_table(path: &Path) {
    let bytes: Vec<u8> = (0..ROWS).flat_map(row).collect();
    std::fs::write(path, bytes).unwrap();
}

struct Server {
    addr: SocketAddr,
    stats: Arc<app::ServiceStats>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(cfg: app::ServiceConfig, read_delay: Option<Duration>) -> Server {
    let hook = read_delay.map(|d| {
        Hook::new(move |p| {
            if p.kind == IoKind::Read {
                std::thread::sleep(d);
            }
            Action::Proceed
        })
    });
    start_with(cfg, hook).await
}

/// A server over a fresh table whose reads go through `hook`.
async fn start_with(cfg: app::ServiceConfig, hook: Option<Hook>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emb.bin");
    write_table(&path);
    // A hooked table must really be read: keep the (freshly written, so resident) rows off the
    // adaptive cache path when a hook is set.
    let adaptive = hook.is_none();
    let opts = TokioOptions::default().adaptive(adaptive);
    let _faults = hook.map(|h| fault::inject(&path, h));
    let layout = RowLayout { base: 0, row_size: ROW_SIZE, rows: None };
    let table = TokioEngine::open_rows(&path, layout, opts).await.unwrap();
    assert_eq!(table.rows(), ROWS);
    serve(Arc::new(table), cfg, dir).await
}

/// A server over `table`.
async fn serve(table: app::Table, cfg: app::ServiceConfig, dir: tempfile::TempDir) -> Server {
    let (router, stats) = app::router(table, cfg);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Server { addr, stats, task, _dir: dir }
}

/// A server over the table at `url`, opened with `eagerio::open_rows` (the service never names a
/// backend), then a few concurrent clients and the bad-row answer.
async fn check_url(url: &str, opts: eagerio::OpenOptions, dir: tempfile::TempDir) {
    let layout = RowLayout { base: 0, row_size: ROW_SIZE, rows: None };
    let table = eagerio::open_rows(url, layout, opts).await.unwrap();
    assert_eq!(table.rows(), ROWS, "{url}");
    let server = serve(table, app::ServiceConfig::default(), dir).await;
    assert_eq!(load(server.addr, 4, 10).await, 0);
    let r = post_rows(server.addr, &[ROWS]).await;
    assert_eq!(r.status, 400, "{url}: {}", r.text());
    assert_eq!(server.stats.served.load(Ordering::Relaxed), 40);
}

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 request on its own connection, within `DEADLINE`.
async fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Reply {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(body).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(DEADLINE, exchange).await.expect("the server did not answer in time");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete response head");
    let head = std::str::from_utf8(&raw[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let mut reply = Reply { status, headers, body: raw[split + 4..].to_vec() };
    let len: usize = reply.header("content-length").expect("a Content-Length").parse().unwrap();
    assert_eq!(reply.body.len(), len, "body length vs Content-Length");
    reply.body.truncate(len);
    reply
}

async fn post_rows(addr: SocketAddr, ids: &[u64]) -> Reply {
    request(addr, "POST", "/rows", serde_json::to_string(ids).unwrap().as_bytes()).await
}

fn expected(ids: &[u64]) -> Vec<u8> {
    ids.iter().flat_map(|&r| row(r)).collect()
}

/// A client's deterministic request stream: 1..=32 ids each, duplicates likely.
fn ids_for(client: u64, n: u64) -> Vec<u64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(client << 32 | n);
    let len = rng.gen_range(1..=32);
    (0..len).map(|_| rng.gen_range(0..ROWS)).collect()
}

/// `clients` concurrent clients sending `requests` each; a 503 is retried after a short pause
/// (bounded). Returns the 503s seen. Every 200 must carry exactly the requested rows.
async fn load(addr: SocketAddr, clients: u64, requests: u64) -> u64 {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            tokio::spawn(async move {
                let mut overloaded = 0;
                for n in 0..requests {
                    let ids = ids_for(c, n);
                    let mut tries = 0;
                    loop {
                        let r = post_rows(addr, &ids).await;
                        if r.status == 503 {
                            assert_eq!(r.header("retry-after"), Some("1"), "503 without Retry-After");
                            assert!(r.text().contains("overloaded"), "{}", r.text());
                            overloaded += 1;
                            tries += 1;
                            assert!(tries < 2000, "client {c} request {n}: still 503 after {tries} tries");
                            tokio::time::sleep(Duration::from_millis(1 + c % 4)).await;
                            continue;
                        }
                        assert_eq!(r.status, 200, "client {c} request {n}: {}", r.text());
                        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
                        assert!(r.body == expected(&ids), "client {c} request {n}: wrong bytes for {ids:?}");
                        break;
                    }
                }
                overloaded
            })
        })
        .collect();
    let mut overloaded = 0;
    for t in tasks {
        overloaded += t.await.unwrap();
    }
    overloaded
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_concurrent_clients_get_their_rows() {
    let server = start(app::ServiceConfig::default(), None).await;
    let overloaded = load(server.addr, 16, 50).await;
    assert_eq!(overloaded, 0, "16 clients under a bound of 64 were refused");
    assert_eq!(server.stats.served.load(Ordering::Relaxed), 16 * 50);
    let info = request(server.addr, "GET", "/info", b"").await;
    assert_eq!((info.status, info.text()), (200, format!("{{\"rows\":{ROWS},\"row_size\":{ROW_SIZE}}}")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_overload_answers_503_then_recovers() {
    // Two gathers at a time, each read 5 ms slow, 16 clients: most first tries find no permit.
    let cfg = app::ServiceConfig { max_in_flight: 2, ..app::ServiceConfig::default() };
    let server = start(cfg, Some(Duration::from_millis(5))).await;
    let overloaded = load(server.addr, 16, 10).await;
    eprintln!("503s answered under overload: {overloaded}");
    assert!(overloaded > 0, "no 503 under 8x overload");
    assert_eq!(server.stats.overloaded.load(Ordering::Relaxed), overloaded);
    assert_eq!(server.stats.served.load(Ordering::Relaxed), 16 * 10, "every request was served in the end");
    // Quiet again: answers correctly, first try.
    let ids = [4095, 0, 17, 17];
    let r = post_rows(server.addr, &ids).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, expected(&ids));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_bad_requests_get_400_with_reason() {
    let cfg = app::ServiceConfig { max_rows: 64, ..app::ServiceConfig::default() };
    let server = start(cfg, None).await;
    let addr = server.addr;

    let r = post_rows(addr, &[1, ROWS, 2]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.text(), format!("row {ROWS} is past the end of the table: the table has {ROWS} rows"));

    for body in [&b"not json"[..], b"[1, \"x\"]", b"[-1]", b"{\"rows\": [1]}", b""] {
        let r = request(addr, "POST", "/rows", body).await;
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(body));
        assert!(r.text().starts_with("malformed body: expected a JSON array of row ids"), "{}", r.text());
    }

    let many: Vec<u64> = (0..65).collect();
    let r = post_rows(addr, &many).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.text(), "too many rows: 65 requested, at most 64 per request");
    assert_eq!(server.stats.bad_requests.load(Ordering::Relaxed), 7);

    // Still serving, at the cap and with none.
    let cap: Vec<u64> = (0..64).rev().collect();
    let r = post_rows(addr, &cap).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, expected(&cap));
    let r = post_rows(addr, &[]).await;
    assert_eq!((r.status, r.body.len()), (200, 0));
}

/// Issue 16 (9): a failed read is a `500` that names no server path (the details go to the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_read_failure_is_500_without_server_paths() {
    let eio = Hook::new(|p| {
        if p.kind == IoKind::Read {
            Action::Fail(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            Action::Proceed
        }
    });
    let server = start_with(app::ServiceConfig::default(), Some(eio)).await;
    let r = post_rows(server.addr, &[1, 2]).await;
    assert_eq!(r.status, 500);
    let body = r.text();
    assert!(!body.contains("emb.bin") && !body.contains(&*server._dir.path().to_string_lossy()), "{body}");
    assert!(body.contains("could not be read"), "{body}");
    assert_eq!(server.stats.failed.load(Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_from_a_file_url() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("emb.bin");
    write_table(&path);
    let url = format!("file://{}", path.display());
    check_url(&url, eagerio::OpenOptions::default(), dir).await;
    let e = eagerio::open_rows(
        "file://relative/emb.bin",
        RowLayout { base: 0, row_size: 1, rows: None },
        Default::default(),
    )
    .await
    .map(|_| ())
    .unwrap_err();
    assert!(e.to_string().contains("absolute path"), "{e}");
}

#[cfg(feature = "object-store")]
#[path = "../crates/eagerio-object-store/tests/support/moto.rs"]
mod moto;

/// The same service over an object in moto's S3, uploaded through eagerio's own multipart sink.
#[cfg(feature = "object-store")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_from_an_s3_url_on_moto() {
    use eagerio::object_store::{store_for_url, ObjectStoreWriter, WriterOptions};
    use eagerio::DataSink;

    let Some(server) = moto::moto_with_bucket("row_service_from_an_s3_url_on_moto", "rows") else { return };
    let url = "s3://rows/tables/emb.bin";
    let opts = eagerio::OpenOptions::default()
        .store_option("aws_endpoint", format!("http://127.0.0.1:{}", server.port))
        .store_option("aws_allow_http", "true")
        .store_option("aws_region", "us-east-1")
        .store_option("aws_access_key_id", "testing")
        .store_option("aws_secret_access_key", "testing")
        .store_option("aws_virtual_hosted_style_request", "false");
    let (store, location) = store_for_url(url, &opts.store).unwrap();
    let sink = ObjectStoreWriter::create(store, location, WriterOptions::default()).await.unwrap();
    sink.append(bytes::Bytes::from((0..ROWS).flat_map(row).collect::<Vec<u8>>())).await.unwrap();
    sink.close().await.unwrap();
    check_url(url, opts.clone(), tempfile::tempdir().unwrap()).await;
    let layout = RowLayout { base: 0, row_size: 1, rows: None };
    let e = eagerio::open_rows("s3://rows/missing.bin", layout, opts).await.map(|_| ()).unwrap_err();
    assert!(matches!(e, eagerio::Error::Io { op: eagerio::core::Op::Open, .. }), "{e}");
}

#[cfg(not(feature = "object-store"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_service_s3_url_needs_the_object_store_feature() {
    let layout = RowLayout { base: 0, row_size: 1, rows: None };
    let e = eagerio::open_rows("s3://rows/emb.bin", layout, Default::default()).await.map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("`object-store` feature"), "{e}");
}
