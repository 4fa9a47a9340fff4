//! Pieces the turn-by-turn lane tests share (`lane_core.rs`, `reliability_lane.rs`): a wake-up
//! that does nothing (the tests run the lane's turns themselves) and a read engine that only
//! records the jobs it is given, for the test to hand to a lane.

use std::sync::{Arc, Mutex};

use eagerio_core::{
    backend::{JobHandle, ReadEngine},
    FileInfo,
};
use eagerio_uring::lane::Notify;

/// A wake-up that does nothing.
pub struct NoNotify;

impl Notify for NoNotify {
    fn notify(&self) {}
}

/// An engine that only records the jobs it is given.
#[derive(Clone)]
pub struct Capture(pub FileInfo, pub Arc<Mutex<Vec<JobHandle>>>);

impl ReadEngine for Capture {
    fn info(&self) -> &FileInfo {
        &self.0
    }

    fn submit(&self, job: JobHandle) {
        self.1.lock().unwrap().push(job);
    }
}
