//! Reliability: real faults on the io_uring lanes (truncation mid-gather is in `faults.rs`): a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

mod common;
#[macro_use]
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use common::{fault_schedule, tokio_block_on as block_on, Uring};

// Truncation mid-gather is checked in `faults.rs`.
real_fault_tests!(@tests Uring::default(), block_on,
    real_disk_full_reports_enospc_and_keeps_acknowledged_writes => disk_full,
    real_read_only_file_refuses_the_sink => read_only_sink,
    real_read_only_filesystem_refuses_the_sink => read_only_filesystem,
    real_file_replaced_under_open_source_reads_the_old_inode => replaced_under_open_source);
