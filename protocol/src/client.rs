//! The one synchronous client of the node agent's local socket, used by the
//! plugin (inside slurmstepd: no threads, no async runtime), the exec wrapper
//! and the `syndeo` command.
//!
//! Everything it reads lies in a directory the job's user can write, and the
//! plugin reads it inside slurmstepd: links are not followed, only regular
//! files and sockets are used, nothing blocks without a bound, and no answer
//! is read past a size cap. What does not fit is an error with a message;
//! nothing hangs and nothing aborts.
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use crate::layout::JobDir;
use crate::local::{check_version, ExecSpecReply, Op, Reply, Request, StatusReply, WaitReply, MAX_LINE};

/// A failure note longer than this is cut (it is one line in practice).
pub const MAX_NOTE: usize = 4096;

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientError {
    /// No agent listens at the socket (not started, or gone).
    Unreachable(String),
    /// The agent took the request and closed the connection without answering.
    Closed,
    /// What answered is not the agent's protocol (or says too much).
    Protocol(String),
    /// Reading or writing failed, or the answer did not come in time.
    Io(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(m) | ClientError::Protocol(m) | ClientError::Io(m) => f.write_str(m),
            ClientError::Closed => f.write_str("the node agent closed the connection without answering"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A client of one job directory's agent socket.
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(dir: &JobDir) -> Client {
        Client { socket: dir.socket() }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connects, retrying every 100 ms until `window` has passed.
    pub fn connect_within(&self, window: Duration) -> Result<UnixStream, ClientError> {
        let until = Instant::now() + window;
        loop {
            match self.connect_once() {
                Ok(s) => return Ok(s),
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => return Err(e),
            }
        }
    }

    fn connect_once(&self) -> Result<UnixStream, ClientError> {
        let unreachable = |why: String| {
            ClientError::Unreachable(format!("cannot reach the node agent at {}: {why}", self.socket.display()))
        };
        let meta = std::fs::symlink_metadata(&self.socket).map_err(|e| unreachable(e.to_string()))?;
        if !meta.file_type().is_socket() {
            return Err(unreachable("it is not a socket".into()));
        }
        UnixStream::connect(&self.socket).map_err(|e| unreachable(e.to_string()))
    }

    /// One request on a fresh connection; the answer within `timeout`.
    pub fn ask<T: DeserializeOwned>(&self, op: Op, timeout: Duration) -> Result<T, ClientError> {
        let stream = self.connect_within(Duration::ZERO)?;
        exchange(stream, &Request::new(op), timeout)
    }

    pub fn status(&self, timeout: Duration) -> Result<StatusReply, ClientError> {
        self.ask(Op::Status, timeout)
    }

    pub fn exec_spec(&self, cwd: Option<PathBuf>, timeout: Duration) -> Result<ExecSpecReply, ClientError> {
        self.ask(Op::ExecSpec { cwd }, timeout)
    }
}

/// Sends `request` on `stream` and reads one reply line: at most
/// [`MAX_LINE`] bytes, within `timeout` (plus 5 s of slack for the agent).
fn exchange<T: DeserializeOwned>(stream: UnixStream, request: &Request, timeout: Duration) -> Result<T, ClientError> {
    let io = |e: std::io::Error| ClientError::Io(format!("talking to the node agent: {e}"));
    let line = serde_json::to_string(request).expect("requests serialize") + "\n";
    stream.set_write_timeout(Some(Duration::from_secs(5))).map_err(io)?;
    stream.set_read_timeout(Some(timeout + Duration::from_secs(5))).map_err(io)?;
    if (&stream).write_all(line.as_bytes()).is_err() {
        return Err(ClientError::Closed);
    }
    let mut reply = String::new();
    match BufReader::new((&stream).take(MAX_LINE as u64 + 1)).read_line(&mut reply) {
        Ok(0) => return Err(ClientError::Closed),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Err(ClientError::Closed),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Err(ClientError::Io(format!("the node agent did not answer within {} s", timeout.as_secs() + 5)))
        }
        Err(e) => return Err(io(e)),
    }
    if !reply.ends_with('\n') {
        let why = if reply.len() > MAX_LINE { "over 64 KiB" } else { "cut off" };
        return Err(ClientError::Protocol(format!("the answer from {} is {why}", "the node agent")));
    }
    parse_reply(&reply)
}

/// Parses one reply line and checks its version.
pub fn parse_reply<T: DeserializeOwned>(line: &str) -> Result<T, ClientError> {
    let shown: String = line.trim().chars().take(200).collect();
    let reply: Reply<T> = serde_json::from_str(line.trim())
        .map_err(|e| ClientError::Protocol(format!("bad answer from the node agent ({e}): {shown:?}")))?;
    check_version(reply.v, "node agent").map_err(ClientError::Protocol)?;
    Ok(reply.body)
}

/// The note the root side left for the job of `dir` instead of starting an
/// agent, if any (in root's notes directory, see [`JobDir::failed_note`]).
/// The note is the user's file: a link, a FIFO, a device or anything but a
/// regular file is an error, never read.
pub fn read_failed_note(dir: &JobDir) -> Result<Option<String>, String> {
    let path = dir.failed_note();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!(
                "{} is a symbolic link, not syndeo's note; the job directory was changed",
                path.display()
            ))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = file.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file, not syndeo's note; the job directory was changed",
            path.display()
        ));
    }
    let mut text = String::new();
    file.take(MAX_NOTE as u64).read_to_string(&mut text).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(Some(text.trim().to_string()))
}

/// How long a step waits for the socket: at first (the root side returns as
/// soon as the agent has started, and the socket appears right after), and
/// after the agent ended mid-wait (its supervisor starts it again at once).
const CONNECT_WINDOW: Duration = Duration::from_secs(10);

/// Asks the job's agent to answer once the cluster is ready or has failed,
/// waiting at most `timeout`. An agent that ends while the step waits is
/// asked again once its supervisor has restarted it (it rejoins the cluster).
pub fn wait_ready(dir: &JobDir, timeout: Duration) -> Result<WaitReply, String> {
    if let Some(error) = read_failed_note(dir)? {
        return Ok(WaitReply::Failed { error });
    }
    let client = Client::new(dir);
    let deadline = Instant::now() + timeout;
    let mut agent_ended = false;
    loop {
        let stream = match client.connect_within(CONNECT_WINDOW.min(deadline.saturating_duration_since(Instant::now())))
        {
            Ok(s) => s,
            Err(_) if agent_ended => {
                return Err(format!(
                    "the node agent at {} ended before the cluster was ready (was it killed?) and did not \
                     come back; this node cannot run the job's steps: see agent.log in that directory",
                    client.socket().display()
                ))
            }
            Err(e) => {
                // The root side may have left a note meanwhile (an agent that could not start).
                if let Some(error) = read_failed_note(dir)? {
                    return Ok(WaitReply::Failed { error });
                }
                return Err(format!(
                    "{e} (the agent is not running: see its log in the job directory or slurmd's log)"
                ));
            }
        };
        let secs = deadline.saturating_duration_since(Instant::now()).as_secs().max(1);
        match exchange(stream, &Request::new(Op::Wait { timeout_secs: secs }), Duration::from_secs(secs)) {
            Ok(reply) => return Ok(reply),
            Err(ClientError::Closed) => agent_ended = true,
            Err(e) => return Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A runtime base with job 7's directory and the notes directory in it.
    fn dir(name: &str) -> (PathBuf, JobDir) {
        let d = std::env::temp_dir().join(format!("syndeo-client-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("7")).unwrap();
        std::fs::create_dir_all(d.join(crate::layout::NOTES_DIR)).unwrap();
        (d.clone(), JobDir::new(&d, 7))
    }

    /// An "agent" on the socket that reads one request and answers `reply`
    /// (or closes without answering when None).
    fn agent(listener: UnixListener, reply: Option<&'static str>) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = String::new();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
            if let Some(r) = reply {
                s.write_all(r.as_bytes()).unwrap();
            }
            req
        })
    }

    #[test]
    fn a_ready_reply_carries_the_environment_and_the_request_names_the_version() {
        let (d, jd) = dir("ready");
        let a = agent(
            UnixListener::bind(jd.socket()).unwrap(),
            Some("{\"v\":1,\"state\":\"ready\",\"env\":{\"RAY_ADDRESS\":\"10.0.0.1:6379\"}}\n"),
        );
        let r = wait_ready(&jd, Duration::from_secs(5)).unwrap();
        let req = a.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(req.starts_with("{\"v\":1,\"op\":\"wait\""), "{req}");
        assert!(matches!(r, WaitReply::Ready { env } if env["RAY_ADDRESS"] == "10.0.0.1:6379"));
    }

    #[test]
    fn a_failure_left_by_the_root_side_is_the_answer_without_an_agent() {
        let (d, jd) = dir("note");
        std::fs::write(jd.failed_note(), "site config is invalid\n").unwrap();
        let r = wait_ready(&jd, Duration::from_secs(5)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(r, WaitReply::Failed { error: "site config is invalid".into() });
    }

    #[test]
    fn a_failure_note_that_is_a_fifo_a_link_or_a_device_is_refused_at_once() {
        let (d, jd) = dir("hostile");
        let note = jd.failed_note();
        assert!(std::process::Command::new("mkfifo").arg(&note).status().unwrap().success());
        let t = Instant::now();
        let e = read_failed_note(&jd).unwrap_err();
        assert!(e.contains("not a regular file") && t.elapsed() < Duration::from_secs(1), "{e}");
        std::fs::remove_file(&note).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &note).unwrap();
        assert!(read_failed_note(&jd).unwrap_err().contains("symbolic link"));
        std::fs::remove_file(&note).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &note).unwrap();
        assert!(read_failed_note(&jd).unwrap_err().contains("symbolic link"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_endless_answer_is_cut_at_the_cap_and_refused() {
        let (d, jd) = dir("endless");
        let listener = UnixListener::bind(jd.socket()).unwrap();
        let a = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let junk = vec![b'x'; 256 * 1024];
            let _ = s.write_all(&junk);
        });
        let e = Client::new(&jd).status(Duration::from_secs(5)).unwrap_err();
        a.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(matches!(&e, ClientError::Protocol(m) if m.contains("over 64 KiB")), "{e:?}");
    }

    #[test]
    fn a_silent_agent_is_a_timeout_not_a_hang() {
        let (d, jd) = dir("silent");
        let listener = UnixListener::bind(jd.socket()).unwrap();
        let t = Instant::now();
        let stream = Client::new(&jd).connect_within(Duration::ZERO).unwrap();
        let (_held, _) = listener.accept().unwrap();
        let e = exchange::<StatusReply>(stream, &Request::new(Op::Status), Duration::ZERO).unwrap_err();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(matches!(e, ClientError::Io(_)), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(8));
    }

    #[test]
    fn a_reply_from_a_newer_protocol_is_refused_naming_the_versions() {
        let e = parse_reply::<StatusReply>("{\"v\":99,\"job\":1}\n").unwrap_err();
        assert!(matches!(&e, ClientError::Protocol(m) if m.contains("version 99")), "{e:?}");
    }

    /// The first "agent" takes the request and ends without answering; the
    /// second, on the same socket path (as its supervisor restarts it),
    /// answers: the step gets the cluster.
    #[test]
    fn a_step_waiting_on_an_agent_that_is_restarted_gets_the_new_agents_answer() {
        let (d, jd) = dir("restart");
        let sock = jd.socket();
        let listener = UnixListener::bind(&sock).unwrap();
        let path = sock.clone();
        let agents = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = String::new();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
            drop((s, listener));
            std::fs::remove_file(&path).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let listener = UnixListener::bind(&path).unwrap();
            let (mut s, _) = listener.accept().unwrap();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
            s.write_all(b"{\"v\":1,\"state\":\"ready\",\"env\":{\"RAY_ADDRESS\":\"10.0.0.2:6379\"}}\n").unwrap();
        });
        let r = wait_ready(&jd, Duration::from_secs(20));
        agents.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(matches!(r.unwrap(), WaitReply::Ready { env } if env["RAY_ADDRESS"] == "10.0.0.2:6379"));
    }

    #[test]
    fn an_agent_that_ends_while_a_step_waits_and_does_not_come_back_is_named_as_gone() {
        let (d, jd) = dir("eof");
        let a = agent(UnixListener::bind(jd.socket()).unwrap(), None);
        let e = wait_ready(&jd, Duration::from_secs(2)).unwrap_err();
        a.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(e.contains("ended before the cluster was ready") && e.contains("did not come back"), "{e}");
    }

    #[test]
    fn a_missing_socket_fails_within_the_timeout() {
        let t = Instant::now();
        let e = wait_ready(&JobDir::at("/nonexistent/job"), Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("cannot reach the node agent"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3));
    }
}
