//! Conformance backends over object stores, shared by the test files.
#![allow(dead_code)]

use std::{path::Path as FsPath, sync::Arc};

use eagerio_core::{conformance::Backend, Error, Result, Sink, SinkOptions, Source};
use eagerio_object_store::{ObjectSink, ObjectStoreEngine, ObjectStoreOptions, ObjectStoreWriter, WriterOptions};
use object_store::{local::LocalFileSystem, path::Path, ObjectStore, ObjectStoreExt, PutPayload};

/// Part size of the conformance sinks: the suite's write-error check fails the write at offset
/// 100 of a 100-byte then a 50-byte append, so parts of 50 bytes make that write one part.
/// Memory and local stores take any part size; S3 takes small parts too until `complete`.
pub const CONFORMANCE_PART: usize = 50;

/// Where the suite's local files go.
pub enum Kind {
    /// Uploaded into this store (memory, S3) under the file's path, before the open.
    Upload(Arc<dyn ObjectStore>),
    /// Served in place by a `LocalFileSystem` rooted at the file's directory.
    Local,
}

pub struct StoreBackend {
    pub kind: Kind,
    pub opts: ObjectStoreOptions,
}

impl StoreBackend {
    pub fn new(kind: Kind) -> StoreBackend {
        StoreBackend { kind, opts: ObjectStoreOptions::default() }
    }

    pub fn locate(&self, path: &FsPath) -> (Arc<dyn ObjectStore>, Path) {
        match &self.kind {
            Kind::Upload(store) => {
                let key = path.to_str().expect("utf-8 temp path").trim_start_matches('/');
                (store.clone(), Path::from(key))
            }
            Kind::Local => {
                let dir = path.parent().expect("a file in a directory");
                let store = LocalFileSystem::new_with_prefix(dir).expect("local store");
                let name = path.file_name().and_then(|n| n.to_str()).expect("a utf-8 file name");
                (Arc::new(store), Path::from(name))
            }
        }
    }

    pub async fn sink(&self, path: &FsPath, opts: WriterOptions) -> Result<ObjectSink> {
        let (store, loc) = self.locate(path);
        ObjectStoreWriter::create(store, loc, opts.name(path.to_path_buf())).await
    }
}

impl Backend for StoreBackend {
    type Engine = ObjectStoreEngine;
    type Writer = ObjectStoreWriter;

    async fn open(&self, path: &FsPath) -> Result<Source<ObjectStoreEngine>> {
        let (store, loc) = self.locate(path);
        if let Kind::Upload(_) = self.kind {
            let bytes = std::fs::read(path).map_err(|source| Error::open(path, source))?;
            store.put(&loc, PutPayload::from(bytes)).await.expect("upload the table");
        }
        let opts = self.opts.clone().name(path.to_path_buf());
        ObjectStoreEngine::open(store, loc, opts).await
    }

    async fn create(&self, path: &FsPath, sink: SinkOptions) -> Result<Sink<ObjectStoreWriter>> {
        let opts = WriterOptions::default().sink(sink).part_size(CONFORMANCE_PART);
        Ok(self.sink(path, opts).await?.into_sink())
    }

    fn staging_full(&self, source: &Source<ObjectStoreEngine>) -> bool {
        // No staging: the analogue is that no task still holds a request of any gather.
        source.engine().workers() == 0
    }

    fn adaptive(&self) -> bool {
        false
    }
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap().block_on(f)
}
