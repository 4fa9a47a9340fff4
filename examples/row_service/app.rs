//! The row service's logic, shared by `examples/row_service/main.rs` and `tests/row_service.rs`.
//!
//! # The API
//! - `POST /rows`, body `application/json`: a JSON array of row ids (`[42, 7, 42]`). The
//!   answer is `200`, `application/octet-stream`: the rows' bytes back to back, in request
//!   order (duplicates repeated), `row_size` bytes each.
//! - `GET /info`: `{"rows": N, "row_size": S}`.
//!
//! # One request, one gather
//! Each `POST /rows` is one [`GatherRows::gather`] on the table, whatever backend serves it (a
//! local file on io_uring lanes or the tokio backend, an S3 object: [`eagerio::open_rows`] picks
//! it from a URL): the reads are planned and submitted inside the handler before it awaits
//! anything, and the response waits only for them.
//!
//! # Load shedding
//! At most [`ServiceConfig::max_in_flight`] gathers run at once. A request that finds no free
//! permit (`Semaphore::try_acquire`) is answered at once with `503 Service Unavailable` and
//! `Retry-After`: nothing queues without bound. If a client goes away mid-gather, the handler's
//! future is dropped, which cancels the gather's remaining reads and releases its permit.
//!
//! # Errors
//! `400 Bad Request`, `text/plain`, with the reason: a malformed body, more than
//! [`ServiceConfig::max_rows`] ids, or a row past the end (naming the row and the table's
//! length). A failed read is `500` with a generic message; eagerio's own message (operation,
//! file, row, offset) goes to the server's log, never to the client: it names server paths. A
//! body over the size limit is axum's `413`.

// Both the example and the test compile this file; each uses only part of it.
#![allow(dead_code)]

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use axum::{
    body::Bytes,
    extract::{DefaultBodyLimit, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use eagerio::GatherRows;
use tokio::sync::Semaphore;

/// Limits of the service.
#[derive(Debug, Clone, Copy)]
pub struct ServiceConfig {
    /// Gathers in flight at once; more are refused with 503.
    pub max_in_flight: usize,
    /// Row ids per request; more are refused with 400.
    pub max_rows: usize,
    /// Seconds the 503's `Retry-After` asks clients to wait.
    pub retry_after_secs: u32,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig { max_in_flight: 64, max_rows: 4096, retry_after_secs: 1 }
    }
}

/// What the service answered so far.
#[derive(Debug, Default)]
pub struct ServiceStats {
    /// `200` answers.
    pub served: AtomicU64,
    /// `503` answers (no permit free).
    pub overloaded: AtomicU64,
    /// `400` answers.
    pub bad_requests: AtomicU64,
    /// `500` answers.
    pub failed: AtomicU64,
}

/// The table every request gathers from: any backend, chosen at run time.
pub type Table = Arc<dyn GatherRows + Send + Sync>;

struct App {
    table: Table,
    permits: Arc<Semaphore>,
    cfg: ServiceConfig,
    stats: Arc<ServiceStats>,
}

/// The service's router over `table`, and its counters.
pub fn router(table: Table, cfg: ServiceConfig) -> (Router, Arc<ServiceStats>) {
    assert!(cfg.max_in_flight > 0, "max_in_flight must be at least 1");
    let stats = Arc::new(ServiceStats::default());
    let app = Arc::new(App { table, permits: Arc::new(Semaphore::new(cfg.max_in_flight)), cfg, stats: stats.clone() });
    // Room for `max_rows` ids of up to 20 digits and a separator, and never under axum's 2 MiB.
    let body_limit = cfg.max_rows.saturating_mul(22).saturating_add(64).max(2 << 20);
    let router = Router::new()
        .route("/rows", post(rows))
        .route("/info", get(info))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(app);
    (router, stats)
}

fn text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], msg).into_response()
}

async fn info(State(app): State<Arc<App>>) -> Response {
    let body = format!("{{\"rows\":{},\"row_size\":{}}}", app.table.rows(), app.table.row_size());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn rows(State(app): State<Arc<App>>, body: Bytes) -> Response {
    let bad = |msg: String| {
        app.stats.bad_requests.fetch_add(1, Ordering::Relaxed);
        text(StatusCode::BAD_REQUEST, msg)
    };
    let ids: Vec<u64> = match serde_json::from_slice(&body) {
        Ok(ids) => ids,
        Err(e) => return bad(format!("malformed body: expected a JSON array of row ids (unsigned integers): {e}")),
    };
    if ids.len() > app.cfg.max_rows {
        return bad(format!("too many rows: {} requested, at most {} per request", ids.len(), app.cfg.max_rows));
    }
    // The bound: no queue, a permit now or a 503 now.
    let Ok(_permit) = app.permits.clone().try_acquire_owned() else {
        app.stats.overloaded.fetch_add(1, Ordering::Relaxed);
        let msg = format!("overloaded: {} gathers in flight; retry later", app.cfg.max_in_flight);
        let mut r = text(StatusCode::SERVICE_UNAVAILABLE, msg);
        r.headers_mut().insert(header::RETRY_AFTER, app.cfg.retry_after_secs.into());
        return r;
    };
    // The reads are submitted here, before the first await.
    let gather = match app.table.gather(&ids) {
        Ok(g) => g,
        Err(e) if e.is_bad_input() => return bad(client_reason(&e)),
        Err(e) => return failed(&app, &e),
    };
    match gather.await {
        Ok(bytes) => {
            app.stats.served.fetch_add(1, Ordering::Relaxed);
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        Err(e) => failed(&app, &e),
    }
}

/// What a client is told about its bad request: eagerio's reason without the server's paths.
fn client_reason(e: &eagerio::Error) -> String {
    match e {
        eagerio::Error::RowOutOfRange { row, rows, .. } => {
            format!("row {row} is past the end of the table: the table has {rows} rows")
        }
        _ => "invalid request".to_string(),
    }
}

/// A failed gather: the details (file, row, offset, OS error) go to the log; the client gets a
/// `500` that names no server path.
fn failed(app: &App, e: &eagerio::Error) -> Response {
    app.stats.failed.fetch_add(1, Ordering::Relaxed);
    tracing::error!(error = %e, "row gather failed");
    text(StatusCode::INTERNAL_SERVER_ERROR, "the rows could not be read; the server's log has the details".to_string())
}
