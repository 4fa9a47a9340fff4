//! A real S3 server for tests: `moto_server` (PyPI `moto[server]`) on a free loopback port.
//! Shared by this crate's moto test and the facade's row service test.
#![allow(dead_code)] // each test binary uses its own part

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Kills the server when the test ends, however it ends.
pub struct Server {
    child: Child,
    /// The loopback port it answers on.
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts moto on a free port and waits until it answers HTTP; `Err` says why it could not.
pub fn start_moto() -> Result<Server, String> {
    let port = free_port();
    let mut last = String::new();
    for cmd in [vec!["moto_server"], vec!["python3", "-m", "moto.server"]] {
        let spawned = Command::new(cmd[0])
            .args(&cmd[1..])
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => {
                last = format!("`{}` could not start: {e}", cmd.join(" "));
                continue;
            }
        };
        let mut server = Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                last = format!("`{}` exited with {status} (is `moto[server]` installed?)", cmd.join(" "));
                break;
            }
            if http(port, "GET", "/").is_ok() {
                return Ok(server);
            }
            if Instant::now() > deadline {
                last = format!("`{}` did not answer on port {port} within 60 s", cmd.join(" "));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        drop(server);
    }
    Err(last)
}

/// One raw HTTP/1.1 request; returns the status line.
pub fn http(port: u16, method: &str, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp.lines().next().unwrap_or_default().to_owned())
}

/// moto with one bucket created, or `None` (printing why) where moto cannot run and `CI` is not
/// set; with `CI` set a missing moto fails the test instead of skipping it.
pub fn moto_with_bucket(test: &str, bucket: &str) -> Option<Server> {
    let server = match start_moto() {
        Ok(s) => s,
        Err(why) if std::env::var_os("CI").is_some() => panic!("CI needs moto_server: {why}"),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}; `pip install 'moto[server]'` to run it");
            return None;
        }
    };
    let status = http(server.port, "PUT", &format!("/{bucket}")).expect("create the bucket");
    assert!(status.contains(" 200"), "creating the bucket: {status}");
    Some(server)
}
