//! The one public error type.
//!
//! Every error says what happened and where: the operation, the file, and the row or offset.
//! Bad arguments are reported before any I/O starts; I/O failures carry the OS error.

use std::{fmt, io, path::PathBuf, sync::Arc};

/// The result type of eagerio.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The operation that failed, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Opening a file.
    Open,
    /// Reading a gather's extent.
    Read,
    /// Writing a sink's chunk.
    Write,
    /// Making a sink durable (`fdatasync`).
    Sync,
    /// Setting up a backend (a ring, registered buffers, an executor).
    Setup,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Open => "opening",
            Op::Read => "reading",
            Op::Write => "writing",
            Op::Sync => "syncing",
            Op::Setup => "setting up",
        })
    }
}

/// One failed write, as reported by a sink's `flush`.
#[derive(Debug, Clone)]
pub struct WriteFailure {
    /// Where the write started.
    pub offset: u64,
    /// How many bytes it was to write.
    pub len: usize,
    /// Why it failed.
    pub error: Arc<io::Error>,
}

impl fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes at offset {}: {}", self.len, self.offset, self.error)
    }
}

/// Names the request a short read or I/O error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Row `row` of a row table.
    Row(u64),
    /// The `index`-th range of a range gather.
    Range(usize),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Row(r) => write!(f, "row {r}"),
            Target::Range(i) => write!(f, "range #{i}"),
        }
    }
}

/// The error type of every eagerio operation.
///
/// Backends keep their own details private and convert into this; `From<Error> for io::Error`
/// lets callers use `?` in either world.
///
/// Every message is whole on its own: where an OS error is the cause, the message ends with it
/// (`reading "t.bin" (row 3 at offset 270): Input/output error (os error 5)`), and
/// [`source`](std::error::Error::source) returns nothing, so error-chain printers (`anyhow`,
/// `eyre`) show it once. [`raw_os_error`](Error::raw_os_error) and [`kind`](Error::kind) give the
/// OS error's code and kind.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A requested row is past the end of the table. Reported before any I/O.
    RowOutOfRange {
        /// The offending row.
        row: u64,
        /// The table's row count.
        rows: u64,
        /// The table's file.
        path: PathBuf,
    },
    /// A byte range is empty, inverted or past the end of the file. Reported before any I/O.
    InvalidRange {
        /// Position of the range in the request.
        index: usize,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
        /// Why it is refused.
        reason: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// An option makes no sense (a zero depth, an alignment that is not a power of two, ...).
    InvalidOptions {
        /// The option's name.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Direct I/O was asked for explicitly and the filesystem refuses it.
    DirectIoUnsupported {
        /// The file.
        path: PathBuf,
        /// What the kernel said.
        source: io::Error,
    },
    /// The file ended before a requested byte: it is shorter than the table says, or it was
    /// truncated while the gather ran.
    ShortRead {
        /// The row or range that could not be read whole.
        target: Target,
        /// The file offset of that row or range.
        offset: u64,
        /// Bytes it needed from that offset.
        wanted: u64,
        /// Bytes the file had.
        got: u64,
        /// The file.
        path: PathBuf,
    },
    /// The operating system reported an error.
    Io {
        /// What was being done.
        op: Op,
        /// The file.
        path: PathBuf,
        /// The file offset, where one applies.
        offset: Option<u64>,
        /// The row or range, where one applies.
        target: Option<Target>,
        /// What the OS said.
        source: io::Error,
    },
    /// One or more writes of a sink failed; `flush`, `sync` and `close` report every one.
    WriteFailed {
        /// The sink's file or object.
        path: PathBuf,
        /// Every failure since the last report, in completion order.
        failures: Vec<WriteFailure>,
    },
    /// A worker or completion handler panicked while serving this operation. The ledger drained
    /// every read first; the source keeps serving.
    Panicked {
        /// What was being done.
        op: Op,
        /// The file.
        path: PathBuf,
        /// The file offset of the read being served, where one applies.
        offset: Option<u64>,
        /// The first row or range that read serves, where one applies.
        target: Option<Target>,
        /// The panic's message, where it was a string.
        message: String,
    },
    /// The backend went away before finishing the operation (its runtime or lane shut down).
    Abandoned {
        /// What was being done.
        op: Op,
        /// The file.
        path: PathBuf,
    },
    /// A gather's deadline passed before every read finished ([`GatherFuture::with_deadline`],
    /// [`Source::with_timeout`]). Its queued reads were dropped and its reads in the kernel
    /// cancelled where the backend can; the future resolved at the deadline, and the reads still
    /// in flight return their buffers when they complete.
    ///
    /// [`GatherFuture::with_deadline`]: crate::GatherFuture::with_deadline
    /// [`Source::with_timeout`]: crate::Source::with_timeout
    TimedOut {
        /// What was being done.
        op: Op,
        /// The file.
        path: PathBuf,
        /// The time from the gather call to its deadline.
        after: std::time::Duration,
        /// Requested rows or ranges not read whole by the deadline.
        unread: u64,
        /// Rows or ranges requested.
        requested: u64,
        /// `"rows"` or `"ranges"`.
        what: &'static str,
    },
    /// A backend broke the read protocol (it reported an extent it never claimed, or one twice).
    /// The gather fails instead of returning bytes no read wrote; this is a bug in the backend.
    Protocol {
        /// The file.
        path: PathBuf,
        /// What the backend did.
        message: String,
    },
    /// The sink is closed.
    Closed {
        /// The sink's file.
        path: PathBuf,
    },
    /// The backend cannot run here (no io_uring, too little locked memory, an old kernel). The
    /// message says which limit and how to raise it.
    Unavailable {
        /// The backend.
        backend: &'static str,
        /// Why, and what to change.
        reason: String,
        /// The OS error behind it, if any.
        source: Option<io::Error>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::RowOutOfRange { row, rows, path } => {
                write!(f, "row {row} is past the end of {path:?}: the table has {rows} rows")
            }
            Error::InvalidRange { index, start, end, reason, path } => {
                write!(f, "range #{index} ({start}..{end}){} is invalid: {reason}", of(path))
            }
            Error::InvalidOptions { option, reason } => write!(f, "invalid option `{option}`: {reason}"),
            Error::DirectIoUnsupported { path, source } => {
                write!(f, "direct I/O on {path:?} is not supported by its filesystem: {source}")
            }
            Error::ShortRead { target, offset, wanted, got, path } => write!(
                f,
                "short read of {target} at offset {offset} of {path:?}: wanted {wanted} bytes, the file gave {got}"
            ),
            Error::Io { op, path, offset, target, source } => {
                write!(f, "{op} {path:?}{}: {source}", at(*offset, *target))
            }
            Error::WriteFailed { path, failures } => match failures.first() {
                Some(first) => write!(f, "{} write(s) to {path:?} failed; first: {first}", failures.len()),
                None => write!(f, "writes to {path:?} failed"),
            },
            Error::Panicked { op, path, offset, target, message } => {
                write!(f, "{op} {path:?}{}: a worker panicked: {message}", at(*offset, *target))
            }
            Error::Abandoned { op, path } => {
                write!(f, "{op} {path:?}: the backend shut down before the operation finished")
            }
            Error::TimedOut { op, path, after, unread, requested, what } => {
                write!(f, "{op} {path:?}: timed out after {after:?} with {unread} of {requested} {what} unread")
            }
            Error::Protocol { path, message } => {
                write!(f, "reading {path:?}: the backend broke the read protocol: {message}")
            }
            Error::Closed { path } => write!(f, "the sink for {path:?} is closed"),
            Error::Unavailable { backend, reason, source } => match source {
                Some(source) => write!(f, "{backend} is unavailable: {reason} ({source})"),
                None => write!(f, "{backend} is unavailable: {reason}"),
            },
        }
    }
}

/// The OS error behind an error is part of its message (see [`Error`]), so no error has a
/// separate `source`.
impl std::error::Error for Error {}

/// ` of "path"`, or nothing for a request planned without a file.
fn of(path: &std::path::Path) -> String {
    if path.as_os_str().is_empty() {
        String::new()
    } else {
        format!(" of {path:?}")
    }
}

fn at(offset: Option<u64>, target: Option<Target>) -> String {
    match (target, offset) {
        (Some(t), Some(o)) => format!(" ({t} at offset {o})"),
        (None, Some(o)) => format!(" at offset {o}"),
        (Some(t), None) => format!(" ({t})"),
        (None, None) => String::new(),
    }
}

impl Error {
    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::RowOutOfRange { .. } | Error::InvalidRange { .. } | Error::InvalidOptions { .. } => {
                io::ErrorKind::InvalidInput
            }
            Error::DirectIoUnsupported { .. } | Error::Unavailable { .. } => io::ErrorKind::Unsupported,
            Error::ShortRead { .. } => io::ErrorKind::UnexpectedEof,
            Error::Io { source, .. } => source.kind(),
            Error::WriteFailed { failures, .. } => failures.first().map_or(io::ErrorKind::Other, |f| f.error.kind()),
            Error::Panicked { .. } | Error::Abandoned { .. } | Error::Protocol { .. } => io::ErrorKind::Other,
            Error::Closed { .. } => io::ErrorKind::BrokenPipe,
            Error::TimedOut { .. } => io::ErrorKind::TimedOut,
        }
    }

    /// The raw OS error code, if this error carries one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } | Error::DirectIoUnsupported { source, .. } => source.raw_os_error(),
            Error::WriteFailed { failures, .. } => failures.first().and_then(|f| f.error.raw_os_error()),
            Error::Unavailable { source: Some(s), .. } => s.raw_os_error(),
            _ => None,
        }
    }

    /// Whether this is a bad argument, reported before any I/O started.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Error::RowOutOfRange { .. } | Error::InvalidRange { .. } | Error::InvalidOptions { .. })
    }

    /// A copy of this error for a second reader of the same outcome (errors are not `Clone`
    /// because `io::Error` is not; the copy keeps the kind, the code and the message).
    pub fn duplicate(&self) -> Error {
        fn dup(e: &io::Error) -> io::Error {
            match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::new(e.kind(), e.to_string()),
            }
        }
        match self {
            Error::RowOutOfRange { row, rows, path } => {
                Error::RowOutOfRange { row: *row, rows: *rows, path: path.clone() }
            }
            Error::InvalidRange { index, start, end, reason, path } => {
                Error::InvalidRange { index: *index, start: *start, end: *end, reason, path: path.clone() }
            }
            Error::InvalidOptions { option, reason } => Error::InvalidOptions { option, reason: reason.clone() },
            Error::DirectIoUnsupported { path, source } => {
                Error::DirectIoUnsupported { path: path.clone(), source: dup(source) }
            }
            Error::ShortRead { target, offset, wanted, got, path } => {
                Error::ShortRead { target: *target, offset: *offset, wanted: *wanted, got: *got, path: path.clone() }
            }
            Error::Io { op, path, offset, target, source } => {
                Error::Io { op: *op, path: path.clone(), offset: *offset, target: *target, source: dup(source) }
            }
            Error::WriteFailed { path, failures } => {
                Error::WriteFailed { path: path.clone(), failures: failures.clone() }
            }
            Error::Panicked { op, path, offset, target, message } => Error::Panicked {
                op: *op,
                path: path.clone(),
                offset: *offset,
                target: *target,
                message: message.clone(),
            },
            Error::Abandoned { op, path } => Error::Abandoned { op: *op, path: path.clone() },
            Error::TimedOut { op, path, after, unread, requested, what } => Error::TimedOut {
                op: *op,
                path: path.clone(),
                after: *after,
                unread: *unread,
                requested: *requested,
                what,
            },
            Error::Protocol { path, message } => Error::Protocol { path: path.clone(), message: message.clone() },
            Error::Closed { path } => Error::Closed { path: path.clone() },
            Error::Unavailable { backend, reason, source } => {
                Error::Unavailable { backend, reason: reason.clone(), source: source.as_ref().map(dup) }
            }
        }
    }

    /// Opening `path` failed with `source`: [`Error::Io`] with [`Op::Open`]. Every backend
    /// builds its open errors here.
    pub fn open(path: &std::path::Path, source: io::Error) -> Error {
        Error::Io { op: Op::Open, path: path.to_path_buf(), offset: None, target: None, source }
    }

    /// Shorthand for an invalid option.
    pub fn invalid_option(option: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidOptions { option, reason: reason.into() }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Turns a panic payload into its message.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

#[cfg(all(test, not(eagerio_loom)))]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Issue 16 (9): an OS error is shown once: in the message, not again as a `source`.
    #[test]
    fn os_errors_are_in_the_message_not_the_source() {
        let e = Error::Io {
            op: Op::Read,
            path: "t.bin".into(),
            offset: Some(270),
            target: Some(Target::Row(3)),
            source: io::Error::from_raw_os_error(libc::EIO),
        };
        assert!(e.to_string().starts_with("reading \"t.bin\" (row 3 at offset 270): Input/output error"), "{e}");
        assert!(e.source().is_none());
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        let e = Error::DirectIoUnsupported { path: "t.bin".into(), source: io::Error::from_raw_os_error(libc::EINVAL) };
        assert!(e.to_string().contains("Invalid argument"), "{e}");
        assert!(e.source().is_none());
        let e = Error::Unavailable {
            backend: "io_uring",
            reason: "setup refused".into(),
            source: Some(io::Error::from_raw_os_error(libc::EPERM)),
        };
        assert!(e.to_string().contains("setup refused (Operation not permitted"), "{e}");
        assert!(e.source().is_none());
    }

    /// Issue 16 (9): `WriteFailed` is public with a public `Vec`; an empty one must not panic.
    #[test]
    fn write_failed_without_failures_does_not_panic() {
        let e = Error::WriteFailed { path: "out.bin".into(), failures: Vec::new() };
        assert_eq!(e.to_string(), "writes to \"out.bin\" failed");
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert_eq!(e.raw_os_error(), None);
    }
}
