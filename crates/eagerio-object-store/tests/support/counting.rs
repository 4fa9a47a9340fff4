//! A store wrapper that counts the GETs reaching the store, the range GETs in flight and the most
//! at once, optionally holding each range GET for a while so that GETs which may overlap do.
//! Shared by the request-limit test and the `remote_gather` example.

use std::{
    fmt,
    ops::Range,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::{
    path::Path, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Counts what reaches `inner`.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn ObjectStore>,
    /// Held by each range GET before it goes on.
    hold: Duration,
    /// GET calls of any kind (`get_ranges` counts as one).
    pub gets: AtomicU64,
    in_flight: AtomicUsize,
    /// The most range GETs in flight at once.
    pub peak: AtomicUsize,
}

impl Counting {
    /// Counts the GETs to `inner`; each range GET is held for `hold` first.
    pub fn new(inner: Arc<dyn ObjectStore>, hold: Duration) -> Counting {
        Counting { inner, hold, gets: AtomicU64::new(0), in_flight: AtomicUsize::new(0), peak: AtomicUsize::new(0) }
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(&self, l: &Path, p: PutPayload, o: PutOptions) -> object_store::Result<PutResult> {
        self.inner.put_opts(l, p, o).await
    }
    async fn put_multipart_opts(
        &self,
        l: &Path,
        o: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(l, o).await
    }
    /// Every GET comes here (`get_range` and `head` are built on it): HEADs are not counted,
    /// range GETs are held and counted in flight.
    async fn get_opts(&self, l: &Path, o: GetOptions) -> object_store::Result<GetResult> {
        if o.head {
            return self.inner.get_opts(l, o).await;
        }
        self.gets.fetch_add(1, Ordering::Relaxed);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        if !self.hold.is_zero() {
            tokio::time::sleep(self.hold).await;
        }
        let got = self.inner.get_opts(l, o).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        got
    }
    /// The inner store's own `get_ranges`, counted as one call.
    async fn get_ranges(&self, l: &Path, r: &[Range<u64>]) -> object_store::Result<Vec<Bytes>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get_ranges(l, r).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, p: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(p)
    }
    async fn list_with_delimiter(&self, p: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(p).await
    }
    async fn copy_opts(&self, f: &Path, t: &Path, o: CopyOptions) -> object_store::Result<()> {
        self.inner.copy_opts(f, t, o).await
    }
}
