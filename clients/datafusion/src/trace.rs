//! `EAGERIO_DF_TRACE=1`: every read a store serves, on standard error, one line each: when it
//! started (µs since the process began), how long it took to its last byte, and its ranges.
//! For finding where a cold query's time goes; the timings include the tracing's own buffering
//! of a `get` (each is collected whole before it is returned). [`io_ms`] sums the time during
//! which at least one read was in flight: a query's I/O time, as its caller waited for it.

use std::{
    fmt,
    ops::Range,
    sync::{Arc, Mutex, OnceLock},
    time::Instant,
};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store_013 as os13;

fn since_start() -> u128 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros()
}

/// Every traced read's span, in µs since the process began, and its bytes.
static SPANS: Mutex<Vec<(u128, u128, u64)>> = Mutex::new(Vec::new());

/// Starts the clock: call once at the process's start.
pub fn start() {
    since_start();
}

/// Now, on the trace's clock.
pub fn now() -> u128 {
    since_start()
}

/// Since `from`: the milliseconds during which at least one traced read was in flight, and the
/// bytes read.
pub fn io_since(from: u128) -> (f64, u64) {
    let mut spans: Vec<(u128, u128, u64)> = SPANS.lock().unwrap().iter().filter(|s| s.0 >= from).copied().collect();
    spans.sort();
    let (mut total, mut reach, mut bytes) = (0, 0, 0);
    for (a, b, n) in spans {
        bytes += n;
        let a = a.max(reach);
        if b > a {
            total += b - a;
            reach = b;
        }
    }
    (total as f64 / 1e3, bytes)
}

/// Logs a marker with its time.
pub fn mark(what: &str) {
    if enabled() {
        eprintln!("mark\t{what}\t{}", since_start());
    }
}

/// Whether `EAGERIO_DF_TRACE` is set.
pub fn enabled() -> bool {
    std::env::var_os("EAGERIO_DF_TRACE").is_some()
}

/// A store whose reads are logged.
#[derive(Debug)]
pub struct Traced(pub Arc<dyn os13::ObjectStore>);

impl fmt::Display for Traced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Traced({})", self.0)
    }
}

fn log(op: &str, t0: u128, ranges: &[Range<u64>]) {
    let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let first = ranges.first().map(|r| r.start).unwrap_or(0);
    SPANS.lock().unwrap().push((t0, since_start(), bytes));
    let list: Vec<String> = ranges.iter().map(|r| format!("{}+{}", r.start, r.end - r.start)).collect();
    eprintln!("trace\t{op}\t{t0}\t{}\t{}\t{bytes}\t{first}\t{}", since_start() - t0, ranges.len(), list.join(","));
}

#[async_trait]
impl os13::ObjectStore for Traced {
    async fn put_opts(
        &self,
        location: &os13::path::Path,
        payload: os13::PutPayload,
        opts: os13::PutOptions,
    ) -> os13::Result<os13::PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &os13::path::Path,
        opts: os13::PutMultipartOptions,
    ) -> os13::Result<Box<dyn os13::MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &os13::path::Path, o: os13::GetOptions) -> os13::Result<os13::GetResult> {
        let t0 = since_start();
        let head = o.head;
        let r = self.0.get_opts(location, o).await?;
        if head {
            log("head", t0, &[]);
            return Ok(r);
        }
        let (meta, range, attributes) = (r.meta.clone(), r.range.clone(), r.attributes.clone());
        let bytes = r.bytes().await?;
        log("get", t0, std::slice::from_ref(&range));
        let payload = os13::GetResultPayload::Stream(stream::once(async move { Ok(bytes) }).boxed());
        Ok(os13::GetResult { payload, meta, range, attributes })
    }

    async fn get_ranges(&self, location: &os13::path::Path, ranges: &[Range<u64>]) -> os13::Result<Vec<Bytes>> {
        let t0 = since_start();
        let out = self.0.get_ranges(location, ranges).await?;
        log("ranges", t0, ranges);
        Ok(out)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, os13::Result<os13::path::Path>>,
    ) -> BoxStream<'static, os13::Result<os13::path::Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&os13::path::Path>) -> BoxStream<'static, os13::Result<os13::ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&os13::path::Path>) -> os13::Result<os13::ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &os13::path::Path,
        to: &os13::path::Path,
        options: os13::CopyOptions,
    ) -> os13::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}
