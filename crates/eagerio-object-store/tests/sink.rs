//! Multipart sinks on `InMemory` and `LocalFileSystem`: the object-store versions of the sink
//! checks that cannot apply as written (see `tests/conformance.rs`), and the gather checks that
//! need the object itself changed.

mod common;

use std::{io, sync::Arc, time::Duration};

use bytes::Bytes;
use common::{block_on, Kind, StoreBackend};
use eagerio_core::{
    conformance::random_file,
    fault::{self, Action, Hook, IoKind},
    DataSink, Error, RowLayout, SinkOptions, Target,
};
use eagerio_object_store::WriterOptions;
use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt, PutPayload};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn backends() -> [(&'static str, StoreBackend); 2] {
    [("memory", StoreBackend::new(Kind::Upload(Arc::new(InMemory::new())))), ("local", StoreBackend::new(Kind::Local))]
}

async fn read_back(b: &StoreBackend, path: &std::path::Path) -> object_store::Result<Bytes> {
    let (store, loc) = b.locate(path);
    store.get(&loc).await?.bytes().await
}

fn eio_at(offset: u64, kind: IoKind) -> Hook {
    Hook::new(move |p| {
        if p.kind == kind && p.offset == offset {
            Action::Fail(io::Error::from_raw_os_error(5))
        } else {
            Action::Proceed
        }
    })
}

/// Appends of random sizes land contiguously in call order across 64 KiB parts; `write_at` at
/// the append position is an append; `write_at` anywhere else is refused at once with a clear
/// error, reported again by the flush; the published object is exactly the appends.
#[test]
fn appends_become_parts_and_write_at_elsewhere_is_refused() {
    block_on(async {
        for (name, b) in backends() {
            let mut rng = StdRng::seed_from_u64(7);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let sink = b.sink(&path, WriterOptions::default().part_size(64 << 10)).await.unwrap();
            let mut expect = Vec::new();
            let mut futs = Vec::new();
            for _ in 0..64 {
                let mut chunk = vec![0u8; rng.gen_range(1..70_000)];
                rng.fill(&mut chunk[..]);
                let w = sink.append(Bytes::from(chunk.clone()));
                assert_eq!(w.offset(), expect.len() as u64);
                expect.extend_from_slice(&chunk);
                futs.push(w);
            }
            let tail = sink.write_at(expect.len() as u64, Bytes::from_static(b"TAIL"));
            expect.extend_from_slice(b"TAIL");
            let refused = sink.write_at(0, Bytes::from_static(b"HEAD")).await.unwrap_err();
            let msg = refused.to_string();
            assert!(msg.contains("appends only") && msg.contains("offset 0"), "{name}: {msg}");
            assert_eq!(refused.kind(), io::ErrorKind::Unsupported, "{name}");
            for f in futs {
                f.await.unwrap();
            }
            tail.await.unwrap();
            match sink.flush().await.unwrap_err() {
                Error::WriteFailed { failures, .. } => {
                    assert_eq!(failures.len(), 1, "{name}");
                    assert_eq!((failures[0].offset, failures[0].len), (0, 4), "{name}");
                }
                other => panic!("{name}: expected WriteFailed, got {other}"),
            }
            assert!(read_back(&b, &path).await.is_err(), "{name}: nothing is visible before close");
            sink.close().await.unwrap();
            assert_eq!(&read_back(&b, &path).await.unwrap()[..], &expect[..], "{name}");
            let w = sink.writer();
            assert!(w.is_completed(), "{name}");
            assert_eq!(w.bytes_uploaded(), expect.len() as u64, "{name}");
            assert_eq!(w.parts_uploaded(), (expect.len() as u64).div_ceil(64 << 10), "{name}");
            assert_eq!(sink.stats().failed, 1, "{name}");
        }
    });
}

/// A failed part fails the write that filled it; the upload is aborted, nothing is published,
/// and every failure of the dropped futures is reported by close; a second close still refuses
/// to publish.
#[test]
fn failed_part_aborts_the_upload_and_close_reports_it() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let _faults = fault::inject(&path, eio_at(3000, IoKind::Write));
            let opts = WriterOptions::default().part_size(1000);
            let sink = b.sink(&path, opts).await.unwrap();
            for i in 0..10u8 {
                drop(sink.append(Bytes::from(vec![i; 1000])));
            }
            let e = sink.close().await.unwrap_err();
            match &e {
                Error::WriteFailed { failures, .. } => {
                    let offsets: Vec<u64> = failures.iter().map(|f| f.offset).collect();
                    assert!(offsets.contains(&3000), "{name}: {e}");
                    assert!(offsets.iter().all(|&o| o >= 3000), "{name}: {e}");
                    let first = failures.iter().find(|f| f.offset == 3000).unwrap();
                    assert_eq!(first.error.raw_os_error(), None, "{name}: the message keeps the part");
                    assert!(first.error.to_string().contains("part #3"), "{name}: {e}");
                }
                other => panic!("{name}: expected WriteFailed, got {other}"),
            }
            let again = sink.close().await.unwrap_err();
            assert!(again.to_string().contains("aborted"), "{name}: {again}");
            assert!(read_back(&b, &path).await.is_err(), "{name}: a failed upload publishes nothing");
            assert!(!sink.writer().is_completed());
            assert!(sink.append(Bytes::from_static(b"x")).await.is_err());
            if let Kind::Local = b.kind {
                // The aborted upload's staging file goes once the abort has run.
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while std::fs::read_dir(dir.path()).unwrap().count() != 0 {
                    assert!(std::time::Instant::now() < deadline, "the staging file of the aborted upload remains");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    });
}

/// A failing `complete` aborts the upload and is reported by close.
#[test]
fn failed_completion_is_reported_and_aborts() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let _faults = fault::inject(&path, eio_at(0, IoKind::Sync));
            let opts = WriterOptions::default();
            let sink = b.sink(&path, opts).await.unwrap();
            sink.append(Bytes::from(vec![1u8; 5000])).await.unwrap();
            let e = sink.close().await.unwrap_err();
            assert!(matches!(e, Error::Io { .. }) && e.to_string().contains("completing"), "{name}: {e}");
            assert!(read_back(&b, &path).await.is_err(), "{name}");
        }
    });
}

/// In-flight bytes stay under the bound while parts upload slowly; queued writes still start
/// without being polled; the object is whole after close.
#[test]
fn backpressure_bound_holds_across_parts() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let sink_opts = SinkOptions::default().max_in_flight_bytes(64 * 1024).append_from(0);
            let _faults = fault::inject(&path, Hook::write_latency(Duration::from_millis(2)));
            let opts = WriterOptions::default().sink(sink_opts).part_size(16 * 1024);
            let sink = b.sink(&path, opts).await.unwrap();
            for i in 0..40u8 {
                drop(sink.append(Bytes::from(vec![i; 16 * 1024])));
                assert!(sink.stats().in_flight_bytes <= 64 * 1024, "{name}");
            }
            assert!(sink.stats().queued > 0, "{name}: the bound must have queued writes");
            sink.ready().await;
            sink.close().await.unwrap();
            let s = sink.stats();
            assert!(s.peak_in_flight_bytes <= 64 * 1024, "{name}: {s:?}");
            let got = read_back(&b, &path).await.unwrap();
            assert_eq!(got.len(), 40 * 16 * 1024, "{name}");
            assert!(got.chunks(16 * 1024).enumerate().all(|(i, c)| c.iter().all(|&x| x == i as u8)), "{name}");
            assert_eq!(sink.writer().parts_uploaded(), 40, "{name}");
        }
    });
}

/// `sync` publishes the object; an object store cannot append to it afterwards.
#[test]
fn sync_publishes_then_appends_are_refused() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let sink = b.sink(&path, WriterOptions::default()).await.unwrap();
            sink.append(Bytes::from_static(b"hello ")).await.unwrap();
            sink.sync().await.unwrap();
            assert_eq!(&read_back(&b, &path).await.unwrap()[..], b"hello ", "{name}");
            let e = sink.append(Bytes::from_static(b"world")).await.unwrap_err();
            assert!(e.to_string().contains("already completed"), "{name}: {e}");
            assert!(sink.close().await.is_err(), "{name}: close reports the refused append");
            sink.close().await.unwrap();
            assert_eq!(&read_back(&b, &path).await.unwrap()[..], b"hello ", "{name}");
        }
    });
}

/// Dropping a sink before close aborts its upload: nothing is published and (local store) the
/// staging file goes.
#[test]
fn dropped_sink_aborts_the_upload() {
    block_on(async {
        let b = StoreBackend::new(Kind::Local);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let sink = b.sink(&path, WriterOptions::default().part_size(100)).await.unwrap();
        sink.append(Bytes::from(vec![3u8; 250])).await.unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the upload stages a file");
        drop(sink);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_dir(dir.path()).unwrap().count() != 0 {
            assert!(std::time::Instant::now() < deadline, "the dropped upload was not aborted");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// An object that shrinks after the open gives a short read naming the row, offset and object
/// (the in-memory version of `truncated_file_then_recovery`), then correct gathers.
#[test]
fn shrunken_object_is_a_short_read_then_recovery() {
    block_on(async {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut rng = StdRng::seed_from_u64(3);
        let row = 5000usize;
        let mut file = vec![0u8; row * 400];
        rng.fill(&mut file[..]);
        let loc = Path::from("t.bin");
        store.put(&loc, PutPayload::from(file.clone())).await.unwrap();
        let table = eagerio_object_store::ObjectStoreEngine::open(store.clone(), loc.clone(), Default::default())
            .await
            .unwrap()
            .rows(RowLayout { base: 0, row_size: row as u64, rows: Some(400) })
            .unwrap();
        store.put(&loc, PutPayload::from(file[..row * 300 + 123].to_vec())).await.unwrap();
        let e = table.gather(&[3, 350, 7]).unwrap().await.unwrap_err();
        assert!(matches!(e, Error::ShortRead { target: Target::Row(350), offset: 1_750_000, got: 0, .. }), "{e}");
        assert!(e.to_string().contains("InMemory/t.bin"), "{e}");
        let got = table.gather(&[3, 299, 7]).unwrap().await.unwrap();
        let want: Vec<u8> = [3, 299, 7].iter().flat_map(|&r| file[r * row..(r + 1) * row].to_vec()).collect();
        assert_eq!(&got[..], &want[..]);
    });
}

/// An object deleted after the open: the gather fails naming the row, with the store's
/// not-found kind; the engine counted the GET and the HEAD behind the error.
#[test]
fn missing_object_names_the_row() {
    block_on(async {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let mut rng = StdRng::seed_from_u64(4);
        let (_d, path, file) = random_file(4096 * 16, &mut rng);
        let loc = Path::from("t.bin");
        store.put(&loc, PutPayload::from(file)).await.unwrap();
        let src = eagerio_object_store::ObjectStoreEngine::open(store.clone(), loc.clone(), Default::default())
            .await
            .unwrap();
        let table = src.rows(RowLayout { base: 0, row_size: 4096, rows: None }).unwrap();
        store.delete(&loc).await.unwrap();
        let e = table.gather(&[5]).unwrap().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
        assert!(e.to_string().contains("row 5") && e.to_string().contains("GET bytes 20480..24576"), "{e}");
        assert_eq!(table.source().engine().requests(), 2);
        drop(path);
    });
}

/// One append spanning many parts starts them all and resolves once all are up.
#[test]
fn one_append_spanning_many_parts() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let sink = b.sink(&path, WriterOptions::default().part_size(1 << 20)).await.unwrap();
            let data: Vec<u8> = (0..(16 << 20) + 5).map(|i| (i % 253) as u8).collect();
            drop(sink.append(Bytes::from(data.clone())));
            sink.close().await.unwrap();
            assert_eq!(sink.writer().parts_uploaded(), 17, "{name}");
            assert!(read_back(&b, &path).await.unwrap() == data, "{name}");
        }
    });
}

/// Once a part has failed, every later write is refused at once, in order, and none is left
/// waiting behind an earlier refused one.
#[test]
fn writes_after_a_failed_part_are_refused_promptly() {
    block_on(async {
        for (name, b) in backends() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let _faults = fault::inject(&path, eio_at(0, IoKind::Write));
            let opts = WriterOptions::default().part_size(100);
            let sink = b.sink(&path, opts).await.unwrap();
            assert!(sink.append(Bytes::from(vec![0u8; 100])).await.is_err(), "{name}");
            let later: Vec<_> = (0..5).map(|_| sink.append(Bytes::from(vec![1u8; 100]))).collect();
            for w in later {
                let e = tokio::time::timeout(Duration::from_secs(5), w).await.expect("a refused write resolves");
                assert!(e.unwrap_err().to_string().contains("aborted"), "{name}");
            }
            match sink.close().await.unwrap_err() {
                Error::WriteFailed { failures, .. } => assert_eq!(failures.len(), 6, "{name}"),
                other => panic!("{name}: expected WriteFailed, got {other}"),
            }
        }
    });
}
