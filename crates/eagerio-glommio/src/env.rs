//! Whether glommio can run here, checked before an executor is built, with an error that says
//! which limit is in the way and how to raise it.
//!
//! glommio refuses to build an executor when the soft `RLIMIT_MEMLOCK` is under 512 KiB (its
//! rings and registered buffers are locked memory) and needs io_uring features of Linux 5.8. Left
//! to itself it reports `MemLockLimit(262144/524288)` or a failed ring setup; [`check_environment`]
//! turns both into [`Error::Unavailable`] naming the limit, the value found and the fix.
//!
//! # References
//! `getrlimit(2)` (`RLIMIT_MEMLOCK`), `uname(2)`, `io_uring_setup(2)`, `systemd.exec(5)`
//! (`LimitMEMLOCK=`), `limits.conf(5)` (`memlock`).

#![allow(unsafe_code)]

use std::{future::Future, io};

use eagerio_core::{Error, Result};
use glommio::{GlommioError, LocalExecutor, LocalExecutorBuilder};

const BACKEND: &str = "eagerio-glommio";

/// The least soft `RLIMIT_MEMLOCK` glommio accepts, in bytes (its own check).
pub const MIN_MEMLOCK_BYTES: u64 = 512 * 1024;

/// The oldest kernel glommio runs on.
pub const MIN_KERNEL: (u32, u32) = (5, 8);

/// What [`check_environment`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// The kernel release, as `uname -r` prints it.
    pub kernel_release: String,
    /// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` for unlimited).
    pub memlock_soft: u64,
    /// The hard `RLIMIT_MEMLOCK` in bytes (`u64::MAX` for unlimited).
    pub memlock_hard: u64,
}

impl Environment {
    /// Reads the kernel release and the locked-memory limits of this process.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if `uname` or `getrlimit` fail (they do not on Linux).
    pub fn detect() -> Result<Environment> {
        // SAFETY: `utsname` is plain old data; all-zero is a valid value.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: `uts` is a valid, writable `utsname`.
        if unsafe { libc::uname(&mut uts) } != 0 {
            return Err(unavailable("uname(2) failed".into(), Some(io::Error::last_os_error())));
        }
        // SAFETY: `uname` NUL-terminates `release`, which lies inside `uts`.
        let release = unsafe { std::ffi::CStr::from_ptr(uts.release.as_ptr()) }.to_string_lossy().into_owned();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: `lim` is a valid, writable `rlimit`.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
            return Err(unavailable("getrlimit(RLIMIT_MEMLOCK) failed".into(), Some(io::Error::last_os_error())));
        }
        // `rlim_t` is not `u64` on every target.
        #[allow(clippy::unnecessary_cast)]
        let bytes = |v: libc::rlim_t| if v == libc::RLIM_INFINITY { u64::MAX } else { v as u64 };
        Ok(Environment {
            kernel_release: release,
            memlock_soft: bytes(lim.rlim_cur),
            memlock_hard: bytes(lim.rlim_max),
        })
    }

    /// Checks this environment against glommio's needs.
    ///
    /// # Errors
    /// [`Error::Unavailable`] naming the kernel release or the locked-memory limit that is too
    /// low, and how to raise it.
    pub fn check(&self) -> Result<()> {
        match parse_release(&self.kernel_release) {
            Some(v) if v < MIN_KERNEL => {
                return Err(unavailable(
                    format!(
                        "the kernel is {} but glommio needs Linux {}.{} or later (io_uring features); \
                         run on a newer kernel or use the eagerio-tokio backend",
                        self.kernel_release, MIN_KERNEL.0, MIN_KERNEL.1
                    ),
                    None,
                ))
            }
            Some(_) => {}
            None => tracing::debug!(release = %self.kernel_release, "unparsable kernel release; not checked"),
        }
        if self.memlock_soft < MIN_MEMLOCK_BYTES {
            let how = if self.memlock_hard >= MIN_MEMLOCK_BYTES {
                format!(
                    "raise it in the shell that starts the program (`ulimit -l {}`; the hard limit allows up to {})",
                    MIN_MEMLOCK_BYTES / 1024,
                    show(self.memlock_hard)
                )
            } else {
                format!(
                    "the hard limit is {} too, so an administrator must raise it: `LimitMEMLOCK=infinity` (or \
                     at least 512K) in the systemd unit, a `memlock` line in /etc/security/limits.conf, or \
                     `--ulimit memlock=-1` for docker",
                    show(self.memlock_hard)
                )
            };
            return Err(unavailable(
                format!(
                    "the locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) is {} but glommio needs at least {} \
                     for its io_uring rings and DMA buffers; {how}",
                    show(self.memlock_soft),
                    show(MIN_MEMLOCK_BYTES)
                ),
                None,
            ));
        }
        Ok(())
    }
}

fn show(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".into()
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

fn unavailable(reason: String, source: Option<io::Error>) -> Error {
    Error::Unavailable { backend: BACKEND, reason, source }
}

/// `"6.8.0-45-generic"` -> `(6, 8)`.
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Checks that glommio can build an executor in this process: a kernel of 5.8 or later and a
/// soft `RLIMIT_MEMLOCK` of at least 512 KiB.
///
/// # Errors
/// [`Error::Unavailable`] naming what is missing and how to change it, for example
/// "the locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) is 256 KiB but glommio needs at least
/// 512 KiB ...; raise it in the shell that starts the program (`ulimit -l 512` ...)".
pub fn check_environment() -> Result<()> {
    Environment::detect()?.check()
}

/// Builds a [`LocalExecutor`] on the calling thread after [`check_environment`], so a low
/// locked-memory limit or an old kernel is a clear error, not glommio's `MemLockLimit(..)`.
///
/// # Errors
/// [`Error::Unavailable`] from [`check_environment`], or if glommio itself refuses (its message
/// is kept in the reason, the OS error as the source).
///
/// # Examples
/// ```no_run
/// let ex = eagerio_glommio::executor(glommio::LocalExecutorBuilder::default())?;
/// ex.run(async { /* open sources, gather */ });
/// # Ok::<(), eagerio_core::Error>(())
/// ```
pub fn executor(builder: LocalExecutorBuilder) -> Result<LocalExecutor> {
    check_environment()?;
    builder.make().map_err(from_glommio_setup)
}

/// Runs `fut` to completion on a fresh [`LocalExecutor`] on this thread (built by
/// [`executor`] with glommio's defaults, unbound).
///
/// # Errors
/// As [`executor`]. Panics of `fut` propagate.
pub fn block_on<F: Future>(fut: F) -> Result<F::Output> {
    Ok(executor(LocalExecutorBuilder::new(glommio::Placement::Unbound))?.run(fut))
}

/// A glommio setup error as [`Error::Unavailable`], keeping the OS error.
pub(crate) fn from_glommio_setup(e: GlommioError<()>) -> Error {
    let reason = match &e {
        GlommioError::ReactorError(glommio::ReactorErrorKind::MemLockLimit(have, need)) => format!(
            "glommio refused to build an executor: the locked-memory limit (RLIMIT_MEMLOCK) is {} but it needs {}; \
             raise it with `ulimit -l 512` or `LimitMEMLOCK=` in the systemd unit",
            show(*have),
            show(*need)
        ),
        other => format!("glommio could not build an executor: {other}"),
    };
    let source = match e {
        GlommioError::IoError(s) | GlommioError::EnhancedIoError { source: s, .. } => Some(s),
        _ => None,
    };
    unavailable(reason, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(release: &str, soft: u64, hard: u64) -> Environment {
        Environment { kernel_release: release.into(), memlock_soft: soft, memlock_hard: hard }
    }

    #[test]
    fn releases_parse() {
        assert_eq!(parse_release("6.18.44-fc-v1045"), Some((6, 18)));
        assert_eq!(parse_release("5.8.0"), Some((5, 8)));
        assert_eq!(parse_release("4.19.0-21-amd64"), Some((4, 19)));
        assert_eq!(parse_release("weird"), None);
    }

    #[test]
    fn old_kernel_is_named() {
        let e = env("5.4.0-150-generic", u64::MAX, u64::MAX).check().unwrap_err();
        let s = e.to_string();
        assert!(s.contains("5.4.0-150-generic") && s.contains("5.8"), "{s}");
        assert!(env("5.8.0", u64::MAX, u64::MAX).check().is_ok());
    }

    #[test]
    fn low_memlock_says_how_to_raise_it() {
        let s = env("6.1.0", 256 * 1024, 8 << 20).check().unwrap_err().to_string();
        assert!(s.contains("RLIMIT_MEMLOCK") && s.contains("256 KiB") && s.contains("ulimit -l 512"), "{s}");
        let s = env("6.1.0", 64 * 1024, 64 * 1024).check().unwrap_err().to_string();
        assert!(s.contains("LimitMEMLOCK") && s.contains("limits.conf"), "{s}");
        assert!(env("6.1.0", MIN_MEMLOCK_BYTES, MIN_MEMLOCK_BYTES).check().is_ok());
    }
}
