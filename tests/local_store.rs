//! `EagerLocalStore`: object_store's own integration suite, unchanged, and the bad inputs of a
//! local store (paths out of the root, directories, FIFOs, files that shrink).
#![cfg(feature = "local-store")]
// One-range lists are what these calls take.
#![allow(clippy::single_range_in_vec_init)]

#[cfg(feature = "object-store")]
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use eagerio::local_store::{EagerLocalStore, LocalStoreOptions};
use futures::StreamExt;
use object_store::{integration::*, local::LocalFileSystem, path::Path, ObjectStore, ObjectStoreExt};

fn store() -> (tempfile::TempDir, EagerLocalStore) {
    let root = tempfile::tempdir().unwrap();
    let store = EagerLocalStore::new(root.path()).unwrap();
    (root, store)
}

/// The cases `LocalFileSystem`'s own tests run (`file_test` in object_store's `local.rs`), and
/// the multipart cases that need no `MultipartStore`, in the same order, on one store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_passes_object_stores_integration_suite() {
    let (_root, s) = store();
    put_get_delete_list(&s).await;
    list_with_offset_exclusivity(&s).await;
    get_opts(&s).await;
    list_uses_directories_correctly(&s).await;
    list_with_delimiter(&s).await;
    rename_and_copy(&s).await;
    copy_if_not_exists(&s).await;
    copy_rename_nonexistent_object(&s).await;
    stream_get(&s).await;
    put_opts(&s, false).await;
    multipart_race_condition(&s, true).await;
    multipart_out_of_order(&s).await;
    let e = get_nonexistent_object(&s, None).await.unwrap_err();
    assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_reads_what_local_file_system_wrote_with_the_same_etag() {
    let (root, s) = store();
    let lfs = LocalFileSystem::new_with_prefix(root.path()).unwrap();
    let data: Bytes = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let p = Path::from("a/b/t.bin");
    lfs.put(&p, data.clone().into()).await.unwrap();
    assert_eq!(s.head(&p).await.unwrap(), lfs.head(&p).await.unwrap());
    let ranges = [0..90, 150_000..150_090, 4096..4096, 10..20_000, 199_990..200_000];
    let ours = s.get_ranges(&p, &ranges).await.unwrap();
    assert_eq!(ours, lfs.get_ranges(&p, &ranges).await.unwrap());
    for (r, b) in ranges.iter().zip(&ours) {
        assert_eq!(b, &data.slice(r.start as usize..r.end as usize));
    }
    // And the other way round, with a get past the 8 MiB chunk (three gathers).
    let big: Bytes = (0..20_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    s.put(&Path::from("big.bin"), big.clone().into()).await.unwrap();
    assert_eq!(lfs.head(&Path::from("big.bin")).await.unwrap(), s.head(&Path::from("big.bin")).await.unwrap());
    assert_eq!(lfs.get(&Path::from("big.bin")).await.unwrap().bytes().await.unwrap(), big);
    assert_eq!(s.get(&Path::from("big.bin")).await.unwrap().bytes().await.unwrap(), big);
    let r = s.get_range(&Path::from("big.bin"), 8_388_000..16_777_300).await.unwrap();
    assert_eq!(r, big.slice(8_388_000..16_777_300));
    // A few large ranges, out of file order and back to back in the file, one empty, from the
    // page cache (`LocalFileSystem`'s reads cached them): each result where its range asked.
    let ranges = [12_000_000..19_000_000, 5..4_000_005, 7..7, 4_000_005..11_999_999, 19_000_000..19_000_090];
    let ours = s.get_ranges(&Path::from("big.bin"), &ranges).await.unwrap();
    assert_eq!(ours, lfs.get_ranges(&Path::from("big.bin"), &ranges).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_refuses_ranges_outside_the_object() {
    let (_root, s) = store();
    let p = Path::from("t.bin");
    s.put(&p, vec![1u8; 100].into()).await.unwrap();
    for bad in [[0..101], [100..101], [200..300]] {
        let e = s.get_ranges(&p, &bad).await.unwrap_err();
        assert!(matches!(e, object_store::Error::Generic { .. }), "{bad:?}: {e}");
        assert!(e.to_string().contains("range"), "{e}");
    }
    #[allow(clippy::reversed_empty_ranges)]
    let e = s.get_ranges(&p, &[50..40]).await.unwrap_err();
    assert!(e.to_string().contains("starts after its end"), "{e}");
    // As LocalFileSystem: a get_range past the end is cut at the end; one starting past it fails.
    assert_eq!(s.get_range(&p, 90..200).await.unwrap().len(), 10);
    assert!(s.get_range(&p, 100..200).await.is_err());
    // The store still serves.
    assert_eq!(s.get_ranges(&p, &[0..100]).await.unwrap()[0].len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_never_reads_through_a_symlink_out_of_its_root() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.bin");
    std::fs::write(&secret, b"not yours").unwrap();
    let (root, s) = store();
    std::fs::write(root.path().join("inside.bin"), b"yours").unwrap();
    std::os::unix::fs::symlink(&secret, root.path().join("abs")).unwrap();
    std::os::unix::fs::symlink(
        "../../../../../../../../../../..".to_string() + secret.to_str().unwrap(),
        root.path().join("rel"),
    )
    .unwrap();
    std::fs::create_dir(root.path().join("d")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("d/out")).unwrap();
    // A link that stays inside the root reads, as in LocalFileSystem.
    std::os::unix::fs::symlink("inside.bin", root.path().join("ok")).unwrap();
    assert_eq!(s.get(&Path::from("ok")).await.unwrap().bytes().await.unwrap(), Bytes::from_static(b"yours"));
    for name in ["abs", "rel", "d/out/secret.bin"] {
        let p = Path::from(name);
        for e in [
            s.get(&p).await.map(drop).unwrap_err(),
            s.get_ranges(&p, &[0..3]).await.map(drop).unwrap_err(),
            s.head(&p).await.map(drop).unwrap_err(),
        ] {
            assert!(matches!(e, object_store::Error::PermissionDenied { .. }), "{name}: {e}");
            assert!(e.to_string().contains("outside the store's root"), "{name}: {e}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_refuses_directories_and_fifos_without_blocking() {
    let (root, s) = store();
    std::fs::create_dir(root.path().join("dir")).unwrap();
    let e = s.get(&Path::from("dir")).await.map(drop).unwrap_err();
    assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
    let fifo = std::ffi::CString::new(root.path().join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let p = Path::from("fifo");
    let limit = Duration::from_secs(10);
    for e in [
        tokio::time::timeout(limit, s.get(&p)).await.expect("a FIFO must not block a get").map(drop).unwrap_err(),
        tokio::time::timeout(limit, s.get_ranges(&p, &[0..1]))
            .await
            .expect("a FIFO must not block get_ranges")
            .map(drop)
            .unwrap_err(),
    ] {
        assert!(e.to_string().contains("is a FIFO, not a regular file"), "{e}");
    }
    let e = s.get(&Path::from("missing")).await.map(drop).unwrap_err();
    assert!(matches!(e, object_store::Error::NotFound { .. }), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_sees_a_file_cut_after_head_and_during_a_get() {
    let (root, s) = store();
    let p = Path::from("t.bin");
    let data: Bytes = (0..48u32 << 20).map(|i| (i % 253) as u8).collect();
    s.put(&p, data.clone().into()).await.unwrap();
    let meta = s.head(&p).await.unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(root.path().join("t.bin")).unwrap();
    file.set_len(1 << 20).unwrap();
    // Cut after head: the ranges head promised are refused, before any read.
    let e = s.get_ranges(&p, &[0..meta.size]).await.unwrap_err();
    assert!(e.to_string().contains("ends past the end of the object"), "{e}");
    // Cut during a get: the first gathers are in flight when the file shrinks; the stream
    // yields a prefix of the old bytes, then an error, never other bytes.
    file.set_len(data.len() as u64).unwrap();
    std::fs::write(root.path().join("t.bin"), &data).unwrap();
    let mut stream = s.get(&p).await.unwrap().into_stream();
    file.set_len(1 << 20).unwrap();
    let mut got = 0usize;
    let mut failed = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => {
                assert_eq!(b, data.slice(got..got + b.len()), "bytes at {got}");
                got += b.len();
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("a get of a file cut to 1 MiB must fail");
    assert!(got < data.len(), "{got}");
    assert!(e.to_string().contains("reading t.bin"), "{e}");
    // The store still serves what is there.
    assert_eq!(s.get_range(&p, 0..10).await.unwrap(), data.slice(0..10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_rereads_replaced_objects_and_bounds_open_files() {
    let root = tempfile::tempdir().unwrap();
    let s = EagerLocalStore::with_options(root.path(), LocalStoreOptions::default().max_open_files(2)).unwrap();
    let p = Path::from("t.bin");
    s.put(&p, vec![1u8; 4096].into()).await.unwrap();
    assert_eq!(s.get_ranges(&p, &[0..4]).await.unwrap()[0], Bytes::from_static(&[1, 1, 1, 1]));
    s.put(&p, vec![2u8; 8192].into()).await.unwrap();
    assert_eq!(s.get_ranges(&p, &[4096..4100]).await.unwrap()[0], Bytes::from_static(&[2, 2, 2, 2]));
    // Rewritten in place (same inode, same size): the times change, so it is read anew.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(root.path().join("t.bin"), vec![3u8; 8192]).unwrap();
    assert_eq!(s.get_ranges(&p, &[0..4]).await.unwrap()[0], Bytes::from_static(&[3, 3, 3, 3]));
    // Replaced by another writer's rename (a new inode): the new file is read, not the old.
    std::fs::write(root.path().join("t.new"), vec![4u8; 8192]).unwrap();
    std::fs::rename(root.path().join("t.new"), root.path().join("t.bin")).unwrap();
    assert_eq!(s.get_ranges(&p, &[0..4]).await.unwrap()[0], Bytes::from_static(&[4, 4, 4, 4]));
    // Grown in place: the new bytes are in range.
    let f = std::fs::OpenOptions::new().append(true).open(root.path().join("t.bin")).unwrap();
    std::io::Write::write_all(&mut &f, &[5u8; 4096]).unwrap();
    assert_eq!(s.get_ranges(&p, &[12_000..12_004]).await.unwrap()[0], Bytes::from_static(&[5, 5, 5, 5]));
    for name in ["a", "b", "c"] {
        s.put(&Path::from(name), vec![9u8; 100].into()).await.unwrap();
        s.get_ranges(&Path::from(name), &[0..1]).await.unwrap();
        assert!(s.open_files() <= 2, "{}", s.open_files());
    }
    assert_eq!(s.open_files(), 2);
    s.delete(&Path::from("c")).await.unwrap();
    assert_eq!(s.open_files(), 1, "a deleted object's file is closed");
    assert!(EagerLocalStore::with_options(root.path(), LocalStoreOptions::default().max_open_files(0)).is_err());
    assert!(EagerLocalStore::new(root.path().join("missing")).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_never_writes_or_moves_through_a_symlink_out_of_its_root() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.bin"), b"not yours").unwrap();
    let (root, s) = store();
    std::fs::create_dir(root.path().join("d")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("d/out")).unwrap();
    s.put(&Path::from("mine.bin"), vec![1u8; 10].into()).await.unwrap();
    let denied = |e: object_store::Error| assert!(matches!(e, object_store::Error::PermissionDenied { .. }), "{e}");
    denied(s.put(&Path::from("d/out/new.bin"), vec![2u8; 10].into()).await.unwrap_err());
    denied(s.put(&Path::from("d/out/sub/new.bin"), vec![2u8; 10].into()).await.unwrap_err());
    denied(s.put_multipart(&Path::from("d/out/new.bin")).await.map(drop).unwrap_err());
    denied(s.rename(&Path::from("d/out/secret.bin"), &Path::from("stolen.bin")).await.unwrap_err());
    denied(s.copy(&Path::from("d/out/secret.bin"), &Path::from("stolen.bin")).await.unwrap_err());
    denied(s.copy(&Path::from("mine.bin"), &Path::from("d/out/mine.bin")).await.unwrap_err());
    denied(s.rename(&Path::from("mine.bin"), &Path::from("d/out/mine.bin")).await.unwrap_err());
    let mut outside_names: Vec<_> =
        std::fs::read_dir(outside.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    outside_names.sort();
    assert_eq!(outside_names, vec![std::ffi::OsString::from("secret.bin")], "nothing written outside the root");
    assert!(root.path().join("mine.bin").exists() && !root.path().join("stolen.bin").exists());
    // An empty range reads nothing, wherever it is, as in LocalFileSystem.
    assert_eq!(s.get_ranges(&Path::from("mine.bin"), &[10..10, 200..200]).await.unwrap(), vec![Bytes::new(); 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_concurrent_creates_publish_exactly_one_whole_object() {
    let (root, s) = store();
    let s = std::sync::Arc::new(s);
    let p = Path::from("k.bin");
    for round in 0..20u8 {
        let _ = s.delete(&p).await;
        let puts = (0..6u8).map(|i| {
            let (s, p) = (s.clone(), p.clone());
            tokio::spawn(async move {
                let opts = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
                s.put_opts(&p, vec![round.wrapping_mul(7).wrapping_add(i); 1 << 20].into(), opts).await.map(|_| i)
            })
        });
        let results: Vec<_> = futures::future::join_all(puts).await.into_iter().map(|r| r.unwrap()).collect();
        let won: Vec<u8> = results.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, object_store::Error::AlreadyExists { .. }), "{e}");
            }
        }
        let got = s.get(&p).await.unwrap().bytes().await.unwrap();
        assert_eq!(got, Bytes::from(vec![round.wrapping_mul(7).wrapping_add(won[0]); 1 << 20]), "round {round}");
        let names: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("k.bin")], "round {round}: staged files left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_put_create_refuses_an_existing_object_and_leaves_no_staged_file() {
    let (root, s) = store();
    let p = Path::from("x/t.bin");
    s.put(&p, vec![1u8; 10].into()).await.unwrap();
    let opts = object_store::PutOptions { mode: object_store::PutMode::Create, ..Default::default() };
    let e = s.put_opts(&p, vec![2u8; 10].into(), opts).await.unwrap_err();
    assert!(matches!(e, object_store::Error::AlreadyExists { .. }), "{e}");
    assert_eq!(s.get(&p).await.unwrap().bytes().await.unwrap(), Bytes::from(vec![1u8; 10]));
    let mut up = s.put_multipart(&Path::from("x/u.bin")).await.unwrap();
    up.put_part(vec![5u8; 100].into()).await.unwrap();
    drop(up);
    let names: Vec<_> = std::fs::read_dir(root.path().join("x")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("t.bin")], "staged files are removed");
    let listed: Vec<_> = s.list(None).map(|m| m.unwrap().location.to_string()).collect().await;
    assert_eq!(listed, vec!["x/t.bin".to_string()]);
}

/// The object-store backend takes the store like any other: its range GETs become gathers.
#[cfg(feature = "object-store")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_serves_the_object_store_backend() {
    use eagerio::object_store::{ObjectStoreEngine, ObjectStoreOptions};
    let (_root, s) = store();
    let data: Bytes = (0..90_000u32).map(|i| (i % 241) as u8).collect();
    let p = Path::from("rows.bin");
    s.put(&p, data.clone().into()).await.unwrap();
    let layout = eagerio::RowLayout { base: 0, row_size: 90, rows: None };
    let table = ObjectStoreEngine::open_rows(Arc::new(s), p, layout, ObjectStoreOptions::default()).await.unwrap();
    let rows = table.gather(&[999, 0, 42, 999]).unwrap().await.unwrap();
    let want: Vec<u8> = [999usize, 0, 42, 999].iter().flat_map(|&r| data[r * 90..r * 90 + 90].to_vec()).collect();
    assert_eq!(&rows[..], &want[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_recycles_large_read_buffers_within_its_budget() {
    let root = tempfile::tempdir().unwrap();
    let store =
        EagerLocalStore::with_options(root.path(), LocalStoreOptions::default().output_pool_bytes(64 << 20)).unwrap();
    let data: Vec<u8> = (0..24u32 << 20).map(|i| (i % 253) as u8 ^ (i >> 20) as u8).collect();
    let path = Path::from("pool.bin");
    store.put(&path, data.clone().into()).await.unwrap();
    let pool = store.output_pool();
    // Column chunks of a row group: back to back and scattered, several MiB in all, read the
    // way a Parquet reader asks (warm: `put` left them in the page cache; then evicted).
    let first = [0..(3 << 20), (5 << 20) + 3..(9 << 20)];
    let second = [(20 << 20) + 1..(24 << 20), (1 << 20)..(2 << 20), 17..(1 << 20)];
    for round in 0..3u64 {
        for ranges in [&first[..], &second[..]] {
            let got = store.get_ranges(&path, ranges).await.unwrap();
            for (b, r) in got.iter().zip(ranges) {
                assert!(b[..] == data[r.start as usize..r.end as usize], "round {round}: range {r:?} differs");
            }
        }
        if round == 1 {
            eagerio_core::sys::evict(&root.path().join("pool.bin")).unwrap();
        }
    }
    // Every read after the first took the buffer the one before gave back: the first read's,
    // of its output's size, which fits the second's.
    assert_eq!((pool.reused(), pool.held()), (5, (7 << 20) - 3));
    pool.clear();
    assert_eq!(pool.held(), 0);
    let off = EagerLocalStore::with_options(root.path(), LocalStoreOptions::default().output_pool_bytes(0)).unwrap();
    drop(off.get_ranges(&path, &first).await.unwrap());
    assert_eq!((off.output_pool().reused(), off.output_pool().held()), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_store_unmap_resident_lets_an_eviction_take_every_page() {
    let (root, store) = store();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    let path = Path::from("warm.bin");
    let file = root.path().join("warm.bin");
    store.put(&path, data.clone().into()).await.unwrap();
    let resident = || eagerio_core::sys::resident_bytes(&std::fs::File::open(&file).unwrap()).unwrap();
    // Warm: the read copies the cached pages through the file's mapping.
    std::fs::read(&file).unwrap();
    let ranges: Vec<_> = (0..1000u64).map(|i| i * 4000 + 9..i * 4000 + 99).collect();
    let got = store.get_ranges(&path, &ranges).await.unwrap();
    assert!(got[500][..] == data[2_000_009..2_000_099]);
    eagerio_core::sys::evict(&file).unwrap();
    let kept = resident();
    assert!(
        kept >= 900 * 4096,
        "the pages the read copied stay mapped, and the eviction skips them: {kept} bytes kept"
    );
    store.unmap_resident();
    eagerio_core::sys::evict(&file).unwrap();
    assert_eq!(resident(), 0, "unmapped, every page is evicted");
    // The store still reads, now from the device.
    assert!(store.get_ranges(&path, &ranges).await.unwrap()[999][..] == data[3_996_009..3_996_099]);
}
