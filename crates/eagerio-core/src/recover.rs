//! A memory copy out of a file mapping that survives the file being cut under it.
//!
//! Touching a page of a shared file mapping that lies past the file's end (the file was
//! truncated after the check) or whose read fails raises `SIGBUS`, and a plain `memcpy` from
//! the mapping would kill the process. [`copy`] is a small assembly routine whose only source
//! accesses are a handful of known load instructions; a process-wide `SIGBUS` handler,
//! installed once by [`install`], recognises a fault of one of them, moves the program counter
//! to where the copy goes on with smaller steps (or returns), and the copy stops exactly at the
//! faulting byte and returns that it stopped short, the way the kernel's own `copy_from_user`
//! reports the bytes it could not copy.
//!
//! Every other `SIGBUS` goes to the handler that was installed before ours, with the same
//! arguments; where that was the default action, the default is put back and the fault recurs,
//! so the process ends exactly as it would have without us. An application that later installs
//! its own `SIGBUS` handler should chain to the previous one (as ours does), or copies from a
//! truncated table end the process as a `memcpy` would.
//!
//! Only x86_64 Linux has the routine; elsewhere [`install`] returns `false` and the caller
//! copies through `process_vm_readv`, which reports a fault as `EFAULT`.

/// Installs the `SIGBUS` handler (once per process) and says whether [`copy`] may be used.
pub fn install() -> bool {
    imp::install()
}

/// Copies `len` bytes from `src` to `dst`; `false` if reading `src` raised `SIGBUS` (the copy
/// stopped at the faulting byte: the bytes before it are in `dst`, the rest are not written).
///
/// # Safety
/// [`install`] returned `true`; `dst` is valid for `len` writable bytes that nothing else
/// accesses during the call; `src..src + len` is mapped readable for the whole call (a file
/// mapping whose file may shrink: that is the fault this survives) and does not overlap `dst`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
pub unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> bool {
    // SAFETY: forwarded from the caller; the routine follows the C calling convention, and the
    // handler `install` put in place turns its fault into a return.
    unsafe { imp::eagerio_core_recover_copy(dst, src, len) == 0 }
}

/// Copies `len` bytes from `src` to `dst`. Never called on this architecture: [`install`]
/// returns `false` here.
///
/// # Safety
/// As on x86_64.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
pub unsafe fn copy(_dst: *mut u8, _src: *const u8, _len: usize) -> bool {
    unreachable!("recover::install() is false on this architecture")
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use std::{
        cell::UnsafeCell,
        mem::MaybeUninit,
        sync::{
            atomic::{AtomicBool, Ordering},
            Once,
        },
    };

    // The copy, in three steps: 64 bytes a turn (four 16-byte loads, then four stores); then 16
    // bytes a turn, and a copy of at least 16 bytes ends with one 16-byte move of its last 16
    // bytes (overlapping bytes already copied, so a 90-byte row takes 64 + 16 + 16 bytes, not ten
    // single-byte turns); single bytes only for a copy shorter than 16. Only the loads touch
    // the source, and each step advances its pointers after its stores, so a faulting load
    // leaves `rsi`/`rdi`/`rdx` at the first byte not yet copied. The handler resumes a fault in
    // the 64-byte loop at the 16-byte step, one there (or in the last move) at the byte loop,
    // and one there at the fixup, which returns the bytes left: the copy stops exactly at the
    // faulting byte, as the kernel's `copy_from_user` does. Plain loads, unlike `rep movsb`, let
    // the CPU overlap the cache misses of neighbouring rows (and this machine's CPUs may lack
    // fast `rep movsb`), and few instructions a row let it overlap more rows' misses: ten byte
    // turns made 40,000 cached 90-byte rows take 1.5 ms longer than glibc's `memcpy`.
    // `xmm0`-`xmm3` are caller-saved.
    std::arch::global_asm!(
        ".pushsection .text.eagerio_core_recover_copy,\"ax\",@progbits",
        ".p2align 4",
        ".globl eagerio_core_recover_copy",
        ".hidden eagerio_core_recover_copy",
        ".type eagerio_core_recover_copy,@function",
        "eagerio_core_recover_copy:",
        "cmp rdx, 16",
        "jb 5f",
        "cmp rdx, 64",
        "jb 3f",
        "2:",
        "movdqu xmm0, [rsi]",
        "movdqu xmm1, [rsi + 16]",
        "movdqu xmm2, [rsi + 32]",
        "movdqu xmm3, [rsi + 48]",
        "movdqu [rdi], xmm0",
        "movdqu [rdi + 16], xmm1",
        "movdqu [rdi + 32], xmm2",
        "movdqu [rdi + 48], xmm3",
        "add rsi, 64",
        "add rdi, 64",
        "sub rdx, 64",
        "cmp rdx, 64",
        "jae 2b",
        "3:",
        ".globl eagerio_core_recover_copy_mid",
        ".hidden eagerio_core_recover_copy_mid",
        "eagerio_core_recover_copy_mid:",
        "cmp rdx, 16",
        "jb 4f",
        "movdqu xmm0, [rsi]",
        "movdqu [rdi], xmm0",
        "add rsi, 16",
        "add rdi, 16",
        "sub rdx, 16",
        "jmp eagerio_core_recover_copy_mid",
        // At least 16 bytes were copied: the last `rdx` (< 16) go with the 16 bytes ending there.
        "4:",
        "test rdx, rdx",
        "jz 7f",
        "movdqu xmm0, [rsi + rdx - 16]",
        "movdqu [rdi + rdx - 16], xmm0",
        "xor edx, edx",
        "jmp 7f",
        "5:",
        ".globl eagerio_core_recover_copy_narrow",
        ".hidden eagerio_core_recover_copy_narrow",
        "eagerio_core_recover_copy_narrow:",
        "test rdx, rdx",
        "jz 7f",
        "movzx eax, byte ptr [rsi]",
        "mov [rdi], al",
        "inc rsi",
        "inc rdi",
        "dec rdx",
        "jmp eagerio_core_recover_copy_narrow",
        "7:",
        ".globl eagerio_core_recover_copy_done",
        ".hidden eagerio_core_recover_copy_done",
        "eagerio_core_recover_copy_done:",
        "xor eax, eax",
        "ret",
        ".globl eagerio_core_recover_copy_fixup",
        ".hidden eagerio_core_recover_copy_fixup",
        "eagerio_core_recover_copy_fixup:",
        "mov rax, rdx",
        "ret",
        ".size eagerio_core_recover_copy, . - eagerio_core_recover_copy",
        ".popsection",
    );

    extern "C" {
        /// Copies `len` bytes; returns the bytes not copied (0 unless a fault stopped it).
        pub fn eagerio_core_recover_copy(dst: *mut u8, src: *const u8, len: usize) -> usize;
        static eagerio_core_recover_copy_mid: u8;
        static eagerio_core_recover_copy_narrow: u8;
        static eagerio_core_recover_copy_done: u8;
        static eagerio_core_recover_copy_fixup: u8;
    }

    /// Where a fault of the copy resumes: a fault anywhere in a loop `[from, to)` goes on at the
    /// next, smaller step, like the kernel's exception table. `None` for any other instruction.
    /// Whole loops, not single loads: a loop's registers are consistent at any of its
    /// instructions (its pointers move only after its stores), and under valgrind a fault is
    /// reported at the start of the loop's block, not at the load.
    fn resume_at(rip: usize) -> Option<usize> {
        // Only the symbols' addresses (raw pointers, no reference: nothing is read).
        let (entry, mid, narrow, done, fixup) = (
            eagerio_core_recover_copy as *const () as usize,
            std::ptr::addr_of!(eagerio_core_recover_copy_mid) as usize,
            std::ptr::addr_of!(eagerio_core_recover_copy_narrow) as usize,
            std::ptr::addr_of!(eagerio_core_recover_copy_done) as usize,
            std::ptr::addr_of!(eagerio_core_recover_copy_fixup) as usize,
        );
        [(entry, mid, mid), (mid, narrow, narrow), (narrow, done, fixup)]
            .into_iter()
            .find(|&(from, to, _)| (from..to).contains(&rip))
            .map(|(_, _, resume)| resume)
    }

    /// The `SIGBUS` disposition found at install, written once before our handler can run.
    struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);
    // SAFETY: written once inside `INSTALL.call_once`, before the handler that reads it is
    // installed; read-only afterwards.
    unsafe impl Sync for Previous {}

    static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));
    static INSTALL: Once = Once::new();
    static INSTALLED: AtomicBool = AtomicBool::new(false);

    pub fn install() -> bool {
        INSTALL.call_once(|| {
            // SAFETY: sigaction with valid pointers; `PREVIOUS` is written before the new
            // handler (which reads it) is installed, and never again.
            unsafe {
                let previous = (*PREVIOUS.0.get()).as_mut_ptr();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), previous) != 0 {
                    return;
                }
                let mut ours: libc::sigaction = std::mem::zeroed();
                ours.sa_sigaction = on_sigbus as *const () as usize;
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut ours.sa_mask);
                if libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) == 0 {
                    INSTALLED.store(true, Ordering::Release);
                }
            }
        });
        INSTALLED.load(Ordering::Acquire)
    }

    /// The handler: a fault of one of the copy's loads resumes where [`resume_at`] says;
    /// anything else goes to the previous disposition. Async-signal-safe: it reads statics and the context only
    /// (and calls `sigaction`/`raise` when forwarding to the default).
    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler.
        unsafe {
            let uc = ctx.cast::<libc::ucontext_t>();
            let rip = &mut (*uc).uc_mcontext.gregs[libc::REG_RIP as usize];
            // A fault (si_code > 0), not a SIGBUS sent by a process, at one of the copy's loads.
            if (*info).si_code > 0 {
                if let Some(resume) = resume_at(*rip as usize) {
                    *rip = resume as i64;
                    return;
                }
            }
            forward(sig, info, ctx);
        }
    }

    /// Hands a `SIGBUS` that is not ours to the disposition found at install.
    ///
    /// # Safety
    /// Called from the handler with its arguments, after `install` wrote `PREVIOUS`.
    unsafe fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: written before our handler was installed (see `install`).
        let previous = unsafe { &*(*PREVIOUS.0.get()).as_ptr() };
        let handler = previous.sa_sigaction;
        if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // Put the default back: a fault recurs when the instruction reruns, and a signal a
            // process sent is raised again (blocked until this handler returns), so the process
            // ends as if we had never been installed.
            // SAFETY: an all-zero sigaction with SIG_DFL is a valid disposition; both calls
            // are async-signal-safe.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
                if (*info).si_code <= 0 {
                    libc::raise(sig);
                }
            }
        } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: an SA_SIGINFO handler has this signature.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            f(sig, info, ctx);
        } else {
            // SAFETY: a plain handler has this signature.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            f(sig);
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    pub fn install() -> bool {
        false
    }
}

#[cfg(all(test, not(eagerio_loom), target_arch = "x86_64", target_os = "linux"))]
mod tests {
    use std::{fs::File, io::Write, os::fd::AsRawFd};

    use super::*;

    /// A two-page file mapped whole, then cut to one page: the second page raises `SIGBUS`.
    fn cut_mapping() -> (tempfile::NamedTempFile, *const u8) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[9u8; 8192]).unwrap();
        let file = File::open(f.path()).unwrap();
        // SAFETY: a fresh read-only shared mapping of an open file (left mapped: test only).
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        assert_ne!(base, libc::MAP_FAILED);
        f.as_file().set_len(4096).unwrap();
        (f, base.cast())
    }

    #[test]
    fn recover_copy_copies_every_length() {
        assert!(install());
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        for len in (0..=200).chain([4095, 4096, 4097, 10_000]) {
            let mut dst = vec![0u8; len];
            // SAFETY: both buffers hold `len` bytes and do not overlap.
            assert!(unsafe { copy(dst.as_mut_ptr(), src.as_ptr(), len) });
            assert_eq!(dst, src[..len]);
        }
    }

    /// A copy that runs into a page past the file's end stops there instead of killing the
    /// process, with exactly the bytes before it copied, wherever the cut falls in the copy's
    /// 64-byte, 16-byte, last-16-byte and single-byte steps; the next copy works.
    #[test]
    fn recover_copy_stops_at_a_cut_page() {
        assert!(install());
        let (_f, base) = cut_mapping();
        let long = [0usize, 1, 15, 16, 17, 63, 64, 100, 4033, 4080, 4095].map(|start| (4096 - start, 4097 - start));
        // Short and row-sized copies with the cut at every byte of them.
        let short = [1usize, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 90, 127, 128, 129]
            .into_iter()
            .flat_map(|len| (0..len).map(move |before| (before, len)));
        for (before, len) in long.into_iter().chain(short) {
            let start = 4096 - before;
            let mut dst = vec![0u8; 8192];
            // SAFETY: `dst` holds 8192 bytes; the mapping is 8192 bytes, its second page past
            // EOF, and `start + len <= 8192`.
            assert!(!unsafe { copy(dst.as_mut_ptr(), base.wrapping_add(start), len) }, "{len} from {start}");
            assert!(dst[..before].iter().all(|&b| b == 9), "{len} from {start}: the bytes before the cut are copied");
            assert!(dst[before..].iter().all(|&b| b == 0), "{len} from {start}: nothing past the cut is written");
        }
        let mut dst = vec![0u8; 4096];
        // SAFETY: as above, within the first page only.
        assert!(unsafe { copy(dst.as_mut_ptr(), base, 4096) });
    }

    /// A `SIGBUS` outside the copy still ends the process, as it would without the handler.
    /// Runs in a child process (this test binary, re-run on this one test).
    #[test]
    fn recover_foreign_sigbus_still_ends_the_process() {
        if std::env::var_os("EAGERIO_RECOVER_CHILD").is_some() {
            assert!(install());
            let (_f, base) = cut_mapping();
            // SAFETY: deliberately not: this read of a page past EOF must end the process.
            let byte = unsafe { std::ptr::read_volatile(base.wrapping_add(4096)) };
            println!("survived a foreign SIGBUS, read {byte}");
            std::process::exit(0);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["recover::tests::recover_foreign_sigbus_still_ends_the_process", "--exact", "--nocapture"])
            .env("EAGERIO_RECOVER_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{out:?}");
    }
}
