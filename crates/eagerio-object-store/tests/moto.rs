//! A real S3 server: `moto_server` (PyPI `moto[server]`) on a free loopback port, driven through
//! `AmazonS3Builder`. The gather checks and the applicable sink checks of the conformance suite
//! run against it, plus a multipart upload of a table, an HTTP error naming the row and status,
//! and S3's part-size rule.
//!
//! Without moto the test prints why and passes; with `CI` set it fails instead.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{block_on, Kind, StoreBackend};
use eagerio_core::{conformance, DataSink, Error, RowLayout};
use eagerio_object_store::{ObjectStoreEngine, ObjectStoreWriter, WriterOptions};
use object_store::{aws::AmazonS3Builder, path::Path, ObjectStore, ObjectStoreExt, RetryConfig};
use rand::{rngs::StdRng, Rng, SeedableRng};

#[path = "support/moto.rs"]
mod moto;

use moto::moto_with_bucket;

fn s3(port: u16, bucket: &str) -> Arc<dyn ObjectStore> {
    let retry = RetryConfig { max_retries: 2, ..Default::default() };
    let store = AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .with_virtual_hosted_style_request(false)
        .with_retry(retry)
        .build()
        .expect("S3 client");
    Arc::new(store)
}

#[test]
fn moto_s3_roundtrips_errors_and_multipart() {
    let Some(server) = moto_with_bucket("moto_s3_roundtrips_errors_and_multipart", "eagerio") else { return };
    let store = s3(server.port, "eagerio");

    block_on(async {
        // A table uploaded through the multipart sink: 5 MiB parts (S3's minimum), the last short.
        let row = 4096usize;
        let rows = 3000usize;
        let mut rng = StdRng::seed_from_u64(11);
        let mut table_bytes = vec![0u8; row * rows];
        rng.fill(&mut table_bytes[..]);
        let loc = Path::from("tables/t.bin");
        let sink = ObjectStoreWriter::create(store.clone(), loc.clone(), WriterOptions::default().part_size(5 << 20))
            .await
            .unwrap();
        for chunk in table_bytes.chunks(1 << 20) {
            drop(sink.append(Bytes::copy_from_slice(chunk)));
        }
        sink.close().await.unwrap();
        assert_eq!(sink.writer().parts_uploaded(), 3);
        assert_eq!(store.head(&loc).await.unwrap().size, table_bytes.len() as u64);

        let table = ObjectStoreEngine::open_rows(
            store.clone(),
            loc.clone(),
            RowLayout { base: 0, row_size: row as u64, rows: None },
            Default::default(),
        )
        .await
        .unwrap();
        let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..rows as u64)).collect();
        let got = table.gather(&ids).unwrap().await.unwrap();
        let want: Vec<u8> =
            ids.iter().flat_map(|&r| table_bytes[r as usize * row..(r as usize + 1) * row].to_vec()).collect();
        assert_eq!(&got[..], &want[..]);
        let engine = table.source().engine();
        assert!(engine.requests() > 0 && engine.bytes_fetched() >= want.len() as u64 / 2);

        // The conformance checks that apply, through S3.
        let b = StoreBackend::new(Kind::Upload(store.clone()));
        conformance::rows_roundtrip(&b).await;
        conformance::ranges_roundtrip(&b).await;
        conformance::output_buffer_reuse(&b).await;
        conformance::edge_requests(&b).await;
        conformance::bad_input_is_refused_before_io(&b).await;
        conformance::read_error_names_the_row(&b).await;
        conformance::drop_mid_flight_then_reuse(&b).await;
        conformance::sink_write_error_reported(&b).await;
        conformance::sink_closed_refuses_writes(&b).await;

        // A gather that fails once the object is gone names the row and the HTTP status.
        store.delete(&loc).await.unwrap();
        let e = table.gather(&[2999, 17]).unwrap().await.unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::Io { .. }), "{msg}");
        assert!(msg.contains("HTTP 404") && (msg.contains("row 17") || msg.contains("row 2999")), "{msg}");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{msg}");

        // Opening a missing object fails at the HEAD, with the status.
        let e = ObjectStoreEngine::open(store.clone(), Path::from("nope.bin"), Default::default()).await.unwrap_err();
        assert!(e.to_string().contains("HTTP 404"), "{e}");

        // S3 refuses parts under 5 MiB but the last: close reports it, the upload is aborted and
        // nothing is published.
        let small = Path::from("small-parts.bin");
        let sink = ObjectStoreWriter::create(store.clone(), small.clone(), WriterOptions::default().part_size(1 << 20))
            .await
            .unwrap();
        sink.append(Bytes::from(vec![9u8; 3 << 20])).await.unwrap();
        let e = sink.close().await.unwrap_err();
        assert!(e.to_string().contains("completing the multipart upload failed with HTTP 400"), "{e}");
        assert!(store.head(&small).await.is_err(), "a refused upload publishes nothing");
    });
    drop(server);
}
