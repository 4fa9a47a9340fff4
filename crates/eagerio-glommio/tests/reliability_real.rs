//! Reliability: real faults on the glommio backend: a file truncated while gathers run, a full
//! disk (an 8 MiB loop-mounted ext4, root only), a read-only file and filesystem for the sink,
//! and a file replaced under an open source. The checks live in `tests/support/real_faults.rs`.

mod common;
#[path = "../../../tests/support/real_faults.rs"]
mod real_faults;

use common::{block_on, fault_schedule, Glommio};

#[test]
fn real_truncated_while_gathers_run() {
    block_on(real_faults::truncated_while_gathers_run(&Glommio::default()));
}

#[test]
fn real_disk_full_reports_enospc_and_keeps_acknowledged_writes() {
    block_on(real_faults::disk_full(&Glommio::default()));
}

#[test]
fn real_read_only_file_refuses_the_sink() {
    block_on(real_faults::read_only_sink(&Glommio::default()));
}

#[test]
fn real_read_only_filesystem_refuses_the_sink() {
    block_on(real_faults::read_only_filesystem(&Glommio::default()));
}

#[test]
fn real_file_replaced_under_open_source_reads_the_old_inode() {
    block_on(real_faults::replaced_under_open_source(&Glommio::default()));
}
