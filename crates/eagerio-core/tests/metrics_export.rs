//! With the `metrics` feature, a source's histograms go to the installed `metrics` recorder, one
//! histogram per kind labelled with the source's path, one value per gather (or per read).
//! The recorder here keeps every value it is given.
#![cfg(all(feature = "metrics", not(eagerio_loom)))]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use eagerio_core::{
    mem::{MemEngine, MemFile},
    Source,
};
use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};

type Values = Arc<Mutex<HashMap<String, Vec<f64>>>>;

/// Keeps every recorded value under `name{path=...}`.
#[derive(Default)]
struct Keep(Values);

struct One(Values, String);

impl HistogramFn for One {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().entry(self.1.clone()).or_default().push(value);
    }
}

impl Recorder for Keep {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        Histogram::from_arc(Arc::new(One(self.0.clone(), name)))
    }
}

#[test]
fn metrics_export_histograms_per_source() {
    let keep = Keep::default();
    let values = keep.0.clone();
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| i as u8).collect();
    // The handles are made when the source is: under the recorder.
    let source = metrics::with_local_recorder(&keep, || {
        Source::new(MemEngine::new(MemFile::new(data), "/mem/m.bin", 64 << 10).unwrap()).with_max_gap(0)
    });
    for _ in 0..3 {
        futures::executor::block_on(source.gather_ranges(&[0..10, 20_000..20_010]).unwrap()).unwrap();
    }
    let values = values.lock().unwrap();
    let count = |name: &str| values.get(&format!("{name}{{path=/mem/m.bin}}")).map_or(0, Vec::len);
    assert_eq!(count("eagerio_gather_seconds"), 3, "{:?}", values.keys());
    assert_eq!(count("eagerio_gather_call_seconds"), 3);
    assert_eq!(count("eagerio_gather_queue_seconds"), 3);
    assert_eq!(count("eagerio_read_seconds"), 6);
    assert!(values.values().flatten().all(|&v| (0.0..10.0).contains(&v)), "seconds, not nanoseconds");
}
