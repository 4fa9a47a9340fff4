//! An HTTP service serving rows of an embedding table: `POST /rows` with a JSON array of row
//! ids answers their bytes, one eager gather per request, with bounded in-flight gathers (503
//! with `Retry-After` on overload) and 400s that say what is wrong. See `app.rs` for the API.
//!
//! The table is a path or a URL, opened with [`eagerio::open_rows`], which picks the backend at
//! run time: io_uring lanes (else the tokio backend) for a local file, range GETs for an object
//! (`s3://bucket/key` with `--store-option aws_endpoint=...` and friends; this needs the facade's
//! `object-store` feature).
//!
//! ```sh
//! cargo run --release --example row_service                     # a demo table, 127.0.0.1:8080
//! cargo run --release --example row_service -- --table emb.bin --row-size 4096 \
//!     --addr 127.0.0.1:9000 --max-in-flight 32 --max-rows 8192
//! cargo run --release --features object-store --example row_service -- --table s3://bucket/emb.bin \
//!     --store-option aws_endpoint=http://127.0.0.1:5000 --store-option aws_allow_http=true
//! curl -s -X POST --data '[42, 7, 42]' http://127.0.0.1:8080/rows | xxd | head
//! curl -s http://127.0.0.1:8080/info
//! ```

mod app;

use std::{io::Write, net::SocketAddr, path::PathBuf};

use eagerio::{OpenOptions, RowLayout};

struct Args {
    table: Option<String>,
    store: OpenOptions,
    row_size: u64,
    addr: SocketAddr,
    cfg: app::ServiceConfig,
}

fn args() -> Args {
    let mut a = Args {
        table: None,
        store: OpenOptions::default(),
        row_size: 90,
        addr: "127.0.0.1:8080".parse().expect("a socket address"),
        cfg: app::ServiceConfig::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let num = || val.parse::<u64>().unwrap_or_else(|e| panic!("{flag}: {val:?}: {e}"));
        match flag.as_str() {
            "--table" => a.table = Some(val.clone()),
            "--store-option" => {
                let (k, v) =
                    val.split_once('=').unwrap_or_else(|| panic!("--store-option {val:?}: expected KEY=VALUE"));
                a.store = std::mem::take(&mut a.store).store_option(k, v);
            }
            "--row-size" => a.row_size = num(),
            "--addr" => a.addr = val.parse().unwrap_or_else(|e| panic!("--addr {val:?}: {e}")),
            "--max-in-flight" => a.cfg.max_in_flight = num() as usize,
            "--max-rows" => a.cfg.max_rows = num() as usize,
            other => panic!(
                "unknown flag {other}; flags: --table PATH|URL --store-option KEY=VALUE --row-size N --addr IP:PORT \
                 --max-in-flight N --max-rows N"
            ),
        }
    }
    a
}

/// Writes a demo table: 100,000 rows of `row_size` bytes, row `r` filled from `r`.
fn demo_table(dir: &std::path::Path, row_size: u64) -> std::io::Result<PathBuf> {
    let path = dir.join("embeddings.bin");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
    for r in 0..100_000u64 {
        let row: Vec<u8> = (0..row_size).map(|i| (r.wrapping_mul(31) ^ i) as u8).collect();
        f.write_all(&row)?;
    }
    f.flush()?;
    Ok(path)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args();
    let scratch = tempfile::tempdir()?;
    let url = match a.table {
        Some(url) => url,
        None => demo_table(scratch.path(), a.row_size)?.display().to_string(),
    };
    let layout = RowLayout { base: 0, row_size: a.row_size, rows: None };
    let table = eagerio::open_rows(&url, layout, a.store).await?;
    println!(
        "serving {} rows of {} B from {url} on http://{} (at most {} gathers in flight, {} rows per request)",
        table.rows(),
        table.row_size(),
        a.addr,
        a.cfg.max_in_flight,
        a.cfg.max_rows
    );
    let (router, _stats) = app::router(table, a.cfg);
    let listener = tokio::net::TcpListener::bind(a.addr).await?;
    axum::serve(listener, router).await?;
    Ok(())
}
