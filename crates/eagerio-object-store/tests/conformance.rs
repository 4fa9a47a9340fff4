//! The conformance suite on `InMemory` and `LocalFileSystem`.
//!
//! Every gather check runs on both stores (the two adaptive-mode checks check the bytes only: an
//! object store has no page cache to serve from), and `truncated_file_then_recovery` on the local one
//! (an `InMemory` object is a copy: truncating the file cannot reach it; `tests/sink.rs` shrinks
//! the object itself instead). Of the sink checks, `sink_write_error_reported` and
//! `sink_closed_refuses_writes` run as they are. The other four cannot apply to an object store
//! and three have adapted versions in `tests/sink.rs`:
//! - `sink_offsets_and_order` and `sink_overlapping_writes_in_call_order` rewrite offset 0 with
//!   `write_at` after appends: a multipart upload cannot rewrite bytes already cut into parts
//!   (the sink refuses such a write; the ordering itself is the core sink's, shared by every
//!   backend and checked on the file backends);
//! - `sink_flush_after_dropped_futures` reads the file after a `flush` and expects the writes
//!   around a failed one to land: an object is visible only once the upload completes, and a
//!   failed part dooms the whole upload (it is aborted);
//! - `sink_backpressure_bound` reads the file after a `flush`, before the upload completes.

mod common;

mod in_memory {
    use super::common::{block_on, Kind, StoreBackend};
    use object_store::memory::InMemory;
    use std::sync::Arc;

    fn backend() -> StoreBackend {
        StoreBackend::new(Kind::Upload(Arc::new(InMemory::new())))
    }

    eagerio_core::conformance_suite!(@tests backend(), block_on,
        rows_roundtrip, large_gather_roundtrip, ranges_roundtrip, output_buffer_reuse, edge_requests, bad_input_is_refused_before_io,
        read_error_names_the_row, read_panic_names_the_row, drop_mid_flight_then_reuse, sink_write_error_reported,
        sink_dropped_flush_keeps_its_report, sink_closed_refuses_writes, adaptive_resident_and_missing_rows,
        adaptive_eviction_races_the_copy, stream_yields_every_request_once, stream_dropped_midway_then_reuse);
}

mod local_fs {
    use super::common::{block_on, Kind, StoreBackend};

    fn backend() -> StoreBackend {
        StoreBackend::new(Kind::Local)
    }

    eagerio_core::conformance_suite!(@tests backend(), block_on,
        rows_roundtrip, large_gather_roundtrip, ranges_roundtrip, output_buffer_reuse, edge_requests, bad_input_is_refused_before_io,
        truncated_file_then_recovery, read_error_names_the_row, read_panic_names_the_row, drop_mid_flight_then_reuse,
        sink_write_error_reported, sink_dropped_flush_keeps_its_report, sink_closed_refuses_writes,
        adaptive_resident_and_missing_rows, adaptive_eviction_races_the_copy, stream_yields_every_request_once,
        stream_dropped_midway_then_reuse, stream_error_after_the_rows_that_landed, tune_learns_from_whole_gathers_only);
}
