//! The sink's offsets, over the in-memory engine: appends reserve contiguous offsets in call
//! order, `write_at` lands where asked, and the file equals the writes applied in call order.
#![cfg(not(eagerio_loom))]

use bytes::Bytes;
use eagerio_core::{
    mem::{MemEngine, MemFile},
    DataSink, Sink, SinkOptions,
};
use proptest::prelude::*;

proptest! {
    /// Appends reserve contiguous offsets in call order, `write_at` lands where asked, and the
    /// file equals the writes applied in call order, whatever the in-flight bound.
    #[test]
    fn offsets_are_reserved_in_call_order(
        ops in prop::collection::vec((any::<bool>(), 0u64..5000, 1usize..3000), 1..40),
        bound in 1usize..10_000,
        start in 0u64..100,
    ) {
        let file = MemFile::default();
        let engine = MemEngine::new(file.clone(), "p.bin", 4096).unwrap();
        let sink = Sink::new(engine, SinkOptions::default().max_in_flight_bytes(bound).append_from(start)).unwrap();
        let mut model: Vec<u8> = Vec::new();
        let mut next = start;
        for (i, &(append, at, len)) in ops.iter().enumerate() {
            let data = Bytes::from(vec![i as u8 + 1; len]);
            let w = if append { sink.append(data.clone()) } else { sink.write_at(at, data.clone()) };
            let off = if append { next } else { at };
            prop_assert_eq!(w.offset(), off);
            if append {
                next += len as u64;
            }
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        }
        prop_assert_eq!(sink.append_offset(), next);
        futures::executor::block_on(sink.flush()).unwrap();
        prop_assert_eq!(file.contents(), model);
        prop_assert_eq!(sink.stats().in_flight, 0);
    }
}
