//! Opening a file or an object by URL, the backend chosen at run time.

use std::{path::PathBuf, sync::Arc};

use eagerio_core::{Error, Gather, GatherRows, Result, RowLayout};

/// Options of [`open`] and [`open_rows`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct OpenOptions {
    /// Configuration of the store an object URL names, as object_store's builders take it
    /// (`aws_endpoint`, `aws_region`, `aws_access_key_id`, `aws_secret_access_key`,
    /// `aws_allow_http`, ...). The environment is not read: pass what it holds if you want it.
    pub store: Vec<(String, String)>,
}

impl OpenOptions {
    /// Adds one store configuration key.
    #[must_use]
    pub fn store_option(mut self, key: impl Into<String>, value: impl Into<String>) -> OpenOptions {
        self.store.push((key.into(), value.into()));
        self
    }
}

/// Where a URL points.
enum Location {
    Local(PathBuf),
    Object(String),
}

fn locate(url: &str) -> Result<Location> {
    match url.split_once("://") {
        None if url.is_empty() => Err(Error::invalid_option("url", "the URL is empty")),
        None => Ok(Location::Local(PathBuf::from(url))),
        Some(("file", rest)) => {
            if !rest.starts_with('/') {
                return Err(Error::invalid_option(
                    "url",
                    format!("{url:?}: a file URL names an absolute path (file:///data/t.bin)"),
                ));
            }
            if rest.contains('%') {
                return Err(Error::invalid_option(
                    "url",
                    format!("{url:?}: percent-escapes are not decoded; pass the path"),
                ));
            }
            Ok(Location::Local(PathBuf::from(rest)))
        }
        Some(_) => Ok(Location::Object(url.to_string())),
    }
}

/// Opens `url` for gathers of byte ranges, with the best backend for it, chosen now:
///
/// - a path, or `file:///path`: the io_uring lanes of the process-wide driver where the ring is
///   available (with feature `uring`), else the tokio backend (feature `tokio`), which the lanes
///   also fall back to by themselves, logging why with `tracing`;
/// - `s3://bucket/key`, `gs://…`, `az://…`, `memory:///…` (feature `object-store`): range GETs
///   through object_store, its store built from `opts.store`.
///
/// The source opened is the backend's own ([`Source`](eagerio_core::Source)), behind the
/// object-safe [`Gather`] trait, so code that serves rows takes `Arc<dyn Gather + Send + Sync>`
/// and never names a backend. Call it inside a tokio runtime: the tokio fallback and the object
/// stores need one.
///
/// # Errors
/// [`Error::InvalidOptions`] (option `url`) for an empty or malformed URL, or a scheme whose
/// backend feature is off; the backend's open errors otherwise (a missing file or object is
/// [`Error::Io`] with op `Open`).
pub async fn open(url: &str, opts: OpenOptions) -> Result<Arc<dyn Gather + Send + Sync>> {
    match locate(url)? {
        Location::Local(path) => local(path).await,
        Location::Object(url) => object(&url, &opts).await,
    }
}

/// [`open`], then a table of fixed-size rows over it, behind the object-safe [`GatherRows`].
///
/// # Errors
/// As [`open`], and as [`RowTable::new`](eagerio_core::RowTable::new) for the layout.
pub async fn open_rows(url: &str, layout: RowLayout, opts: OpenOptions) -> Result<Arc<dyn GatherRows + Send + Sync>> {
    match locate(url)? {
        Location::Local(path) => local_rows(path, layout).await,
        Location::Object(url) => object_rows(&url, layout, &opts).await,
    }
}

/// The engine local files open on: the io_uring lanes where built with `uring`, else tokio's.
#[cfg(feature = "uring")]
pub(crate) type LocalEngine = eagerio_uring::UringEngine;
#[cfg(all(feature = "tokio", not(feature = "uring")))]
pub(crate) type LocalEngine = eagerio_tokio::TokioEngine;

#[cfg(feature = "uring")]
pub(crate) async fn local_source(path: PathBuf) -> Result<eagerio_core::Source<eagerio_uring::UringEngine>> {
    let source = eagerio_uring::UringEngine::open(&path, Default::default()).await?;
    let e = source.engine();
    tracing::info!(path = %path.display(), mode = ?e.mode(), reason = ?e.fallback_reason(), "opened on io_uring lanes");
    Ok(source)
}

#[cfg(all(feature = "tokio", not(feature = "uring")))]
pub(crate) async fn local_source(path: PathBuf) -> Result<eagerio_core::Source<eagerio_tokio::TokioEngine>> {
    tracing::info!(path = %path.display(), "opened on the tokio backend (eagerio built without `uring`)");
    eagerio_tokio::TokioEngine::open(&path, Default::default()).await
}

#[cfg(any(feature = "uring", feature = "tokio"))]
async fn local(path: PathBuf) -> Result<Arc<dyn Gather + Send + Sync>> {
    Ok(Arc::new(local_source(path).await?))
}

#[cfg(any(feature = "uring", feature = "tokio"))]
async fn local_rows(path: PathBuf, layout: RowLayout) -> Result<Arc<dyn GatherRows + Send + Sync>> {
    Ok(Arc::new(local_source(path).await?.rows(layout)?))
}

#[cfg(not(any(feature = "uring", feature = "tokio")))]
async fn local(path: PathBuf) -> Result<Arc<dyn Gather + Send + Sync>> {
    Err(no_local(&path))
}

#[cfg(not(any(feature = "uring", feature = "tokio")))]
async fn local_rows(path: PathBuf, _: RowLayout) -> Result<Arc<dyn GatherRows + Send + Sync>> {
    Err(no_local(&path))
}

#[cfg(not(any(feature = "uring", feature = "tokio")))]
fn no_local(path: &std::path::Path) -> Error {
    Error::invalid_option("url", format!("{}: local files need eagerio's `uring` or `tokio` feature", path.display()))
}

#[cfg(feature = "object-store")]
async fn object_source(
    url: &str,
    opts: &OpenOptions,
) -> Result<eagerio_core::Source<eagerio_object_store::ObjectStoreEngine>> {
    let (store, location) = eagerio_object_store::store_for_url(url, &opts.store)?;
    let source = eagerio_object_store::ObjectStoreEngine::open(store, location, Default::default()).await?;
    tracing::info!(url, "opened on object_store range GETs");
    Ok(source)
}

#[cfg(feature = "object-store")]
async fn object(url: &str, opts: &OpenOptions) -> Result<Arc<dyn Gather + Send + Sync>> {
    Ok(Arc::new(object_source(url, opts).await?))
}

#[cfg(feature = "object-store")]
async fn object_rows(url: &str, layout: RowLayout, opts: &OpenOptions) -> Result<Arc<dyn GatherRows + Send + Sync>> {
    Ok(Arc::new(object_source(url, opts).await?.rows(layout)?))
}

#[cfg(not(feature = "object-store"))]
async fn object(url: &str, _: &OpenOptions) -> Result<Arc<dyn Gather + Send + Sync>> {
    Err(no_object(url))
}

#[cfg(not(feature = "object-store"))]
async fn object_rows(url: &str, _: RowLayout, _: &OpenOptions) -> Result<Arc<dyn GatherRows + Send + Sync>> {
    Err(no_object(url))
}

#[cfg(not(feature = "object-store"))]
fn no_object(url: &str) -> Error {
    Error::invalid_option("url", format!("{url:?}: object URLs need eagerio's `object-store` feature"))
}

#[cfg(test)]
mod tests {
    use super::{locate, Location};

    #[test]
    fn open_locate_sorts_paths_files_and_objects() {
        assert!(matches!(locate("/data/t.bin").unwrap(), Location::Local(p) if p.to_str() == Some("/data/t.bin")));
        assert!(
            matches!(locate("file:///data/t.bin").unwrap(), Location::Local(p) if p.to_str() == Some("/data/t.bin"))
        );
        assert!(matches!(locate("s3://b/k").unwrap(), Location::Object(u) if u == "s3://b/k"));
        for bad in ["", "file://data/t.bin", "file:///a%20b"] {
            let e = locate(bad).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains("invalid option `url`"), "{bad}: {e}");
        }
    }
}
