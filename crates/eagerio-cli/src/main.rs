//! `eagerio`: what eagerio would do on your file, and how fast it is there.
//!
//! ```text
//! eagerio probe FILE                                   filesystem, device, O_DIRECT, io_uring, memlock, the choice, the price
//! eagerio bench FILE --row-size N [--rows K] [--runs R] [--svg OUT.svg]
//! eagerio gather FILE --row-size N [--hex] ROW...      rows to stdout, raw or hex
//! ```
//!
//! Install with `cargo install --path crates/eagerio-cli`. Bad arguments exit with status 2 and
//! the usage; a file that cannot be opened or read exits with status 1 and the reason.

mod args;
mod bench;
mod probe;
mod rng;

use std::{io::Write, process::ExitCode};

use args::{Command, UsageError};

const USAGE: &str = "\
usage:
  eagerio probe FILE
  eagerio bench FILE --row-size N [--rows K] [--runs R] [--svg OUT.svg]
  eagerio gather FILE --row-size N [--hex] ROW...

  probe   the file's filesystem and device, O_DIRECT alignment (STATX_DIOALIGN), whether
          io_uring is available and registered staging fits RLIMIT_MEMLOCK, the backend, depth
          and starting gap eagerio picks for it, and the price per read and per KiB it fits
          from 9 cold gathers of the file (the tuned gap follows from it)
  bench   eagerio against mmap and a serial pread loop on K random rows (default 10000) of
          N bytes, cold (evicted before every run) and warm (cached first), R runs each
          (default 3, interleaved); --svg writes a chart
  gather  the rows, in the order given, to stdout: raw bytes, or one hex line per row";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = match args::parse(&args) {
        Ok(cmd) => cmd,
        Err(UsageError(why)) => {
            eprintln!("eagerio: {why}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = match cmd {
        Command::Help => {
            println!("{USAGE}");
            Ok(())
        }
        Command::Probe { file } => probe::run(&file),
        Command::Bench(b) => bench::run(&b),
        Command::Gather { file, row_size, hex, rows } => gather(&file, row_size, hex, &rows),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eagerio: {e}");
            ExitCode::from(1)
        }
    }
}

/// The error of a command that ran: a message for the user.
pub type Failure = Box<dyn std::error::Error>;

/// A tokio runtime for the commands that gather (the tokio fallback and object stores need one).
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn gather(file: &str, row_size: u64, hex: bool, rows: &[u64]) -> Result<(), Failure> {
    let rt = runtime()?;
    let bytes = rt.block_on(async {
        let layout = eagerio::RowLayout { base: 0, row_size, rows: None };
        let table = eagerio::open_rows(file, layout, eagerio::OpenOptions::default()).await?;
        table.gather(rows)?.await
    })?;
    let mut out = std::io::stdout().lock();
    if hex {
        for (row, bytes) in rows.iter().zip(bytes.chunks(row_size as usize)) {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "{row}: {hex}")?;
        }
    } else {
        out.write_all(&bytes)?;
    }
    out.flush()?;
    Ok(())
}
