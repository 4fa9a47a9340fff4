//! eagerio io_uring lanes (being written).
