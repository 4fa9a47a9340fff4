//! object_store errors, turned into `io::Error`s whose message keeps the HTTP status.

use std::{error::Error as StdError, io};

/// The HTTP status code behind an object_store error, if a server gave one.
///
/// object_store keeps the status inside a private retry error; its text ("... status code: 503
/// Service Unavailable ...") is the public part, so this walks the error's source chain and reads
/// the first status from it. `None` for errors that never reached a server (a refused connection,
/// a timeout, a local-filesystem error).
pub fn http_status(err: &(dyn StdError + 'static)) -> Option<u16> {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(code) = parse_status(&e.to_string()) {
            return Some(code);
        }
        cur = e.source();
    }
    None
}

fn parse_status(text: &str) -> Option<u16> {
    const MARK: &str = "status code: ";
    let at = text.find(MARK)? + MARK.len();
    let digits = text.get(at..at + 3)?;
    let code: u16 = digits.parse().ok()?;
    (100..600).contains(&code).then_some(code)
}

/// `what` (e.g. "GET bytes 0..4096") failed with `err`: an `io::Error` whose kind follows the
/// object_store variant (or the status) and whose message names the HTTP status first.
pub(crate) fn to_io(what: &str, err: &object_store::Error) -> io::Error {
    use object_store::Error as E;
    let status = http_status(err);
    let text = err.to_string();
    let kind = match err {
        E::NotFound { .. } => io::ErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        E::NotSupported { .. } | E::NotImplemented { .. } => io::ErrorKind::Unsupported,
        E::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        _ => match status {
            Some(400) => io::ErrorKind::InvalidInput,
            Some(408) | Some(504) => io::ErrorKind::TimedOut,
            _ if text.contains("timed out") => io::ErrorKind::TimedOut,
            _ => io::ErrorKind::Other,
        },
    };
    let msg = match status {
        Some(code) => format!("{what} failed with HTTP {code}: {text}"),
        None => format!("{what} failed: {text}"),
    };
    io::Error::new(kind, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Leaf;
    impl std::fmt::Display for Leaf {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Server returned non-2xx status code: 503 Service Unavailable: slow down")
        }
    }
    impl StdError for Leaf {}

    #[test]
    fn status_is_read_from_the_chain() {
        let err = object_store::Error::Generic { store: "S3", source: Box::new(Leaf) };
        assert_eq!(http_status(&err), Some(503));
        let io = to_io("GET bytes 0..10", &err);
        assert!(io.to_string().starts_with("GET bytes 0..10 failed with HTTP 503: "), "{io}");
        assert!(io.to_string().contains("slow down"), "{io}");
        assert_eq!(parse_status("status code: 99x"), None);
        assert_eq!(parse_status("no status here"), None);
        let nf = object_store::Error::NotFound { path: "a".into(), source: "gone".into() };
        assert_eq!(to_io("HEAD", &nf).kind(), io::ErrorKind::NotFound);
        assert_eq!(http_status(&nf), None);
    }
}
