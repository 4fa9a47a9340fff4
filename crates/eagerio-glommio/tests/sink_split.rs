//! The glommio sink's split: whole aligned blocks through `O_DIRECT`, unaligned heads and tails
//! through the page cache, overlapping writes in call order.

use std::future::Future;

use bytes::Bytes;
use eagerio_core::DataSink;
use eagerio_glommio::{GlommioWriter, WriterOptions};

fn run<F: Future>(f: F) -> F::Output {
    eagerio_glommio::block_on(f).expect("glommio executor")
}

fn apply(model: &mut Vec<u8>, at: u64, data: &[u8]) {
    let end = at as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[at as usize..end].copy_from_slice(data);
}

#[test]
fn aligned_middles_go_direct_and_edges_buffered() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let sink = GlommioWriter::create(&path, WriterOptions::default()).await.unwrap();
        let w = sink.engine().clone();
        assert!(w.is_direct(), "ext4/xfs temp dirs support O_DIRECT");
        let a = w.alignment();
        assert!(a >= 4096 && a.is_power_of_two());
        let big = Bytes::from(vec![1u8; 1 << 20]);
        sink.write_at(0, big).await.unwrap();
        assert_eq!(w.stats().direct_bytes, 1 << 20);
        assert_eq!(w.stats().buffered_bytes, 0);
        // 10,000 bytes at offset a + 100: head to 2a, whole blocks, then the tail.
        let at = a + 100;
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        sink.write_at(at, Bytes::from(data.clone())).await.unwrap();
        let end = at + 10_000;
        let direct = (end & !(a - 1)) - 2 * a;
        assert_eq!(w.stats().direct_bytes, (1 << 20) + direct);
        assert_eq!(w.stats().buffered_bytes, 10_000 - direct);
        sink.close().await.unwrap();
        let mut model = vec![1u8; 1 << 20];
        apply(&mut model, at, &data);
        assert_eq!(std::fs::read(&path).unwrap(), model);
    });
}

#[test]
fn overlapping_writes_land_in_call_order() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let sink = GlommioWriter::create(&path, WriterOptions::default()).await.unwrap();
        let mut model = Vec::new();
        let mut futs = Vec::new();
        for round in 0..40u64 {
            let base = round * 50_000;
            for (k, (off, len)) in
                [(0u64, 20_000usize), (10, 100), (5000, 8192), (4096, 4096), (19_990, 30)].into_iter().enumerate()
            {
                let data = vec![(round as u8).wrapping_mul(7).wrapping_add(k as u8 + 1); len];
                apply(&mut model, base + off, &data);
                futs.push(sink.write_at(base + off, Bytes::from(data)));
            }
        }
        for f in futs {
            f.await.unwrap();
        }
        sink.close().await.unwrap();
        assert!(sink.stats().held >= 40 * 4, "{:?}", sink.stats());
        assert_eq!(std::fs::read(&path).unwrap(), model);
    });
}

#[test]
fn buffered_only_and_keep() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"0123456789").unwrap();
        let opts = WriterOptions::default().keep(true).buffered_only(true);
        let sink = GlommioWriter::create(&path, opts).await.unwrap();
        assert!(!sink.engine().is_direct());
        let w = sink.append(Bytes::from(vec![b'x'; 8192]));
        assert_eq!(w.offset(), 10, "keep appends after the existing bytes");
        w.await.unwrap();
        sink.close().await.unwrap();
        assert_eq!(sink.engine().stats().direct_bytes, 0);
        let got = std::fs::read(&path).unwrap();
        assert_eq!(&got[..10], b"0123456789");
        assert!(got[10..].iter().all(|&b| b == b'x') && got.len() == 8202);
    });
}

#[test]
fn create_errors_name_the_path() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let e = GlommioWriter::create(dir.path().join("no/such/dir/out"), WriterOptions::default()).await.unwrap_err();
        assert!(e.to_string().contains("no/such/dir"), "{e}");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    });
}
