//! The preload library in a real process: a Python that binds a port another
//! socket of its uid holds (SO_REUSEPORT, as `agent/ports.rs` holds them)
//! gets it only when the port is listed in SYNDEO_HELD_PORTS and the library
//! is preloaded; unlisted ports and port 0 pass through untouched.
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The cdylib, built for these tests: `cargo test` builds only the test
/// harness of a cdylib crate, so the library itself comes from a nested
/// `cargo build` into its own target dir (the outer cargo holds the lock on
/// the usual one while tests run).
fn library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().unwrap();
            let target = exe.ancestors().nth(3).unwrap().join("preload-test");
            let status = Command::new(env!("CARGO"))
                .args(["build", "--quiet", "-p", "syndeo-preload", "--target-dir"])
                .arg(&target)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo build of the preload library");
            assert!(status.success(), "cargo build -p syndeo-preload failed");
            target.join("debug/libsyndeo_preload.so")
        })
        .clone()
}

/// A holder like the agent's: SO_REUSEPORT, no SO_REUSEADDR, not listening.
const HOLD_AND_BIND: &str = r#"
import socket, sys
port = int(sys.argv[1])
h = socket.socket(); h.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); h.bind(("0.0.0.0", port))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", port)); s.listen(); print("bound")
except OSError as e:
    print("refused", e.errno)
"#;

fn bind_under_hold(port: u16, preload: bool, held: &str) -> String {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", HOLD_AND_BIND, &port.to_string()]).env("SYNDEO_HELD_PORTS", held);
    if preload {
        cmd.env("LD_PRELOAD", library());
    }
    let out = cmd.output().expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string() + &String::from_utf8_lossy(&out.stderr)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn a_listed_held_port_is_bound_by_its_owner_only_through_the_preload_library() {
    assert!(library().is_file(), "{} is built with the tests", library().display());
    let port = free_port();
    assert_eq!(bind_under_hold(port, false, &port.to_string()), "refused 98", "Ray's own bind, without the library");
    assert_eq!(bind_under_hold(port, true, &port.to_string()), "bound");
}

#[test]
fn an_unlisted_port_is_left_as_it_is() {
    let port = free_port();
    assert_eq!(bind_under_hold(port, true, &(port + 1).to_string()), "refused 98");
}
