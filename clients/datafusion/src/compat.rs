//! object_store 0.13's `ObjectStore` (DataFusion 55's) over any 0.14 store (eagerio's, parquet
//! 60's). The two traits have the same methods and types of the same shape; this module only
//! moves values from one crate's types to the other's. Every method is passed through.

use std::{fmt, ops::Range, sync::Arc};

use async_trait::async_trait;
use bytes::Bytes;
use futures::{stream::BoxStream, FutureExt, StreamExt, TryFutureExt, TryStreamExt};
use object_store as os14;
use object_store_013 as os13;

/// A 0.14 store seen as a 0.13 one.
pub struct Compat(pub Arc<dyn os14::ObjectStore>);

impl fmt::Display for Compat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for Compat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Compat({:?})", self.0)
    }
}

fn path14(p: &os13::path::Path) -> os14::path::Path {
    // A 0.13 path is already valid, so it parses the same in 0.14.
    os14::path::Path::parse(p.as_ref()).unwrap_or_else(|_| os14::path::Path::from(p.as_ref()))
}

fn path13(p: os14::path::Path) -> os13::path::Path {
    os13::path::Path::parse(p.as_ref()).unwrap_or_else(|_| os13::path::Path::from(p.as_ref()))
}

fn err13(e: os14::Error) -> os13::Error {
    use os14::Error as E;
    match e {
        E::NotFound { path, source } => os13::Error::NotFound { path, source },
        E::AlreadyExists { path, source } => os13::Error::AlreadyExists { path, source },
        E::Precondition { path, source } => os13::Error::Precondition { path, source },
        E::NotModified { path, source } => os13::Error::NotModified { path, source },
        E::NotImplemented { operation, implementer } => os13::Error::NotImplemented { operation, implementer },
        E::PermissionDenied { path, source } => os13::Error::PermissionDenied { path, source },
        E::Unauthenticated { path, source } => os13::Error::Unauthenticated { path, source },
        E::NotSupported { source } => os13::Error::NotSupported { source },
        E::Generic { store, source } => os13::Error::Generic { store, source },
        other => os13::Error::Generic { store: "object_store 0.14", source: Box::new(other) },
    }
}

fn meta13(m: os14::ObjectMeta) -> os13::ObjectMeta {
    os13::ObjectMeta {
        location: path13(m.location),
        last_modified: m.last_modified,
        size: m.size,
        e_tag: m.e_tag,
        version: m.version,
    }
}

fn put_result13(r: os14::PutResult) -> os13::PutResult {
    os13::PutResult { e_tag: r.e_tag, version: r.version }
}

fn payload14(p: os13::PutPayload) -> os14::PutPayload {
    p.into_iter().collect()
}

fn no_attributes(what: &str, empty: bool) -> os13::Result<()> {
    if empty {
        Ok(())
    } else {
        Err(os13::Error::NotImplemented {
            operation: format!("`{what}` with attributes"),
            implementer: "Compat".into(),
        })
    }
}

#[derive(Debug)]
struct Upload(Box<dyn os14::MultipartUpload>);

#[async_trait]
impl os13::MultipartUpload for Upload {
    fn put_part(&mut self, data: os13::PutPayload) -> os13::UploadPart {
        self.0.put_part(payload14(data)).map_err(err13).boxed()
    }

    async fn complete(&mut self) -> os13::Result<os13::PutResult> {
        self.0.complete().await.map(put_result13).map_err(err13)
    }

    async fn abort(&mut self) -> os13::Result<()> {
        self.0.abort().await.map_err(err13)
    }
}

#[async_trait]
impl os13::ObjectStore for Compat {
    async fn put_opts(
        &self,
        location: &os13::path::Path,
        payload: os13::PutPayload,
        opts: os13::PutOptions,
    ) -> os13::Result<os13::PutResult> {
        no_attributes("put_opts", opts.attributes.is_empty())?;
        let mode = match opts.mode {
            os13::PutMode::Overwrite => os14::PutMode::Overwrite,
            os13::PutMode::Create => os14::PutMode::Create,
            os13::PutMode::Update(v) => {
                os14::PutMode::Update(os14::UpdateVersion { e_tag: v.e_tag, version: v.version })
            }
        };
        let opts = os14::PutOptions { mode, ..Default::default() };
        self.0.put_opts(&path14(location), payload14(payload), opts).await.map(put_result13).map_err(err13)
    }

    async fn put_multipart_opts(
        &self,
        location: &os13::path::Path,
        opts: os13::PutMultipartOptions,
    ) -> os13::Result<Box<dyn os13::MultipartUpload>> {
        no_attributes("put_multipart_opts", opts.attributes.is_empty())?;
        let up = self.0.put_multipart_opts(&path14(location), Default::default()).await.map_err(err13)?;
        Ok(Box::new(Upload(up)))
    }

    async fn get_opts(&self, location: &os13::path::Path, o: os13::GetOptions) -> os13::Result<os13::GetResult> {
        let range = o.range.map(|r| match r {
            os13::GetRange::Bounded(r) => os14::GetRange::Bounded(r),
            os13::GetRange::Offset(n) => os14::GetRange::Offset(n),
            os13::GetRange::Suffix(n) => os14::GetRange::Suffix(n),
        });
        let opts = os14::GetOptions {
            if_match: o.if_match,
            if_none_match: o.if_none_match,
            if_modified_since: o.if_modified_since,
            if_unmodified_since: o.if_unmodified_since,
            range,
            version: o.version,
            head: o.head,
            ..Default::default()
        };
        let r = self.0.get_opts(&path14(location), opts).await.map_err(err13)?;
        let payload = match r.payload {
            os14::GetResultPayload::File(f, p) => os13::GetResultPayload::File(f, p),
            os14::GetResultPayload::Stream(s) => os13::GetResultPayload::Stream(s.map_err(err13).boxed()),
        };
        Ok(os13::GetResult { payload, meta: meta13(r.meta), range: r.range, attributes: Default::default() })
    }

    async fn get_ranges(&self, location: &os13::path::Path, ranges: &[Range<u64>]) -> os13::Result<Vec<Bytes>> {
        self.0.get_ranges(&path14(location), ranges).await.map_err(err13)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, os13::Result<os13::path::Path>>,
    ) -> BoxStream<'static, os13::Result<os13::path::Path>> {
        // A 0.13 error in the input is passed on as the 0.14 store's own failure to delete.
        let input = locations
            .map(|r| {
                r.map(|p| path14(&p))
                    .map_err(|e| os14::Error::Generic { store: "object_store 0.13", source: Box::new(e) })
            })
            .boxed();
        self.0.delete_stream(input).map(|r| r.map(path13).map_err(err13)).boxed()
    }

    fn list(&self, prefix: Option<&os13::path::Path>) -> BoxStream<'static, os13::Result<os13::ObjectMeta>> {
        self.0.list(prefix.map(path14).as_ref()).map(|r| r.map(meta13).map_err(err13)).boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&os13::path::Path>,
        offset: &os13::path::Path,
    ) -> BoxStream<'static, os13::Result<os13::ObjectMeta>> {
        self.0
            .list_with_offset(prefix.map(path14).as_ref(), &path14(offset))
            .map(|r| r.map(meta13).map_err(err13))
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&os13::path::Path>) -> os13::Result<os13::ListResult> {
        let r = self.0.list_with_delimiter(prefix.map(path14).as_ref()).await.map_err(err13)?;
        Ok(os13::ListResult {
            common_prefixes: r.common_prefixes.into_iter().map(path13).collect(),
            objects: r.objects.into_iter().map(meta13).collect(),
        })
    }

    async fn copy_opts(
        &self,
        from: &os13::path::Path,
        to: &os13::path::Path,
        options: os13::CopyOptions,
    ) -> os13::Result<()> {
        let mode = match options.mode {
            os13::CopyMode::Overwrite => os14::CopyMode::Overwrite,
            os13::CopyMode::Create => os14::CopyMode::Create,
        };
        let opts = os14::CopyOptions { mode, ..Default::default() };
        self.0.copy_opts(&path14(from), &path14(to), opts).await.map_err(err13)
    }

    async fn rename_opts(
        &self,
        from: &os13::path::Path,
        to: &os13::path::Path,
        options: os13::RenameOptions,
    ) -> os13::Result<()> {
        let target_mode = match options.target_mode {
            os13::RenameTargetMode::Overwrite => os14::RenameTargetMode::Overwrite,
            os13::RenameTargetMode::Create => os14::RenameTargetMode::Create,
        };
        let opts = os14::RenameOptions { target_mode, ..Default::default() };
        self.0.rename_opts(&path14(from), &path14(to), opts).await.map_err(err13)
    }
}
