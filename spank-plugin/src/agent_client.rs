//! Synchronous client for the node agent's local socket (`<job dir>/agent.sock`):
//! one JSON request line, one JSON reply line. Used by job steps to wait for
//! the cluster; no threads, no async runtime.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Left by the prolog, in place of an agent, when the job cannot have a
/// cluster on this node (syndeo-agent's `job::FAILED_FILE`).
pub const FAILED_FILE: &str = "failed";

/// The agent's answer to `wait`.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum WaitReply {
    /// The cluster is up: set these variables in the step's environment.
    Ready { env: BTreeMap<String, String> },
    /// The cluster cannot come up; `error` says why and what to do.
    Failed { error: String },
    /// Still starting when the wait ran out.
    Starting { detail: String },
}

/// How long a step waits for the socket: at first (the prolog returns as
/// soon as the agent has started, and the socket appears right after), and
/// after the agent ended mid-wait (its supervisor starts it again at once).
const CONNECT_WINDOW: Duration = Duration::from_secs(10);

/// Asks the agent to answer once the cluster is ready or has failed, waiting
/// at most `timeout`. An agent that ends while the step waits is asked again
/// once its supervisor has restarted it (it rejoins the cluster).
pub fn wait_ready(socket: &Path, timeout: Duration) -> Result<WaitReply, String> {
    if let Some(error) = socket.parent().and_then(|d| std::fs::read_to_string(d.join(FAILED_FILE)).ok()) {
        return Ok(WaitReply::Failed { error });
    }
    let deadline = Instant::now() + timeout;
    let mut agent_ended = false;
    loop {
        let stream = match connect(socket, deadline.min(Instant::now() + CONNECT_WINDOW)) {
            Ok(s) => s,
            Err(_) if agent_ended => {
                return Err(format!(
                    "the node agent at {} ended before the cluster was ready (was it killed?) and did not \
                     come back; this node cannot run the job's steps: see agent.log in that directory",
                    socket.display()
                ))
            }
            Err(e) => {
                return Err(format!(
                    "cannot reach the node agent at {}: {e} (the agent is not running: \
                     see its log in the job directory or slurmd's log)",
                    socket.display()
                ))
            }
        };
        match ask(stream, deadline)? {
            Some(line) => return parse_reply(&line),
            None => agent_ended = true,
        }
    }
}

/// Connects to the socket, retrying until `until`.
fn connect(socket: &Path, until: Instant) -> std::io::Result<UnixStream> {
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(e),
        }
    }
}

/// One `wait` request; None if the agent closed the socket without answering.
fn ask(stream: UnixStream, deadline: Instant) -> Result<Option<String>, String> {
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let secs = deadline.saturating_duration_since(Instant::now()).as_secs().max(1);
    let request = format!("{{\"op\":\"wait\",\"timeout_secs\":{secs}}}\n");
    if writer.write_all(request.as_bytes()).is_err() {
        return Ok(None);
    }
    stream.set_read_timeout(Some(Duration::from_secs(secs + 5))).map_err(|e| e.to_string())?;
    let mut line = String::new();
    match BufReader::new(stream).read_line(&mut line) {
        Ok(0) => Ok(None),
        Ok(_) => Ok(Some(line)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
        Err(e) => Err(format!("no answer from the node agent: {e}")),
    }
}

pub fn parse_reply(line: &str) -> Result<WaitReply, String> {
    serde_json::from_str(line.trim()).map_err(|e| format!("bad answer from the node agent ({e}): {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reply_carries_the_environment() {
        let r = parse_reply(r#"{"state":"ready","env":{"RAY_ADDRESS":"10.0.0.1:6379"}}"#).unwrap();
        match r {
            WaitReply::Ready { env } => assert_eq!(env["RAY_ADDRESS"], "10.0.0.1:6379"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn failed_reply_carries_the_cause() {
        let r = parse_reply(r#"{"state":"failed","error":"image /x not found"}"#).unwrap();
        assert_eq!(r, WaitReply::Failed { error: "image /x not found".into() });
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_reply("hello").is_err());
    }

    #[test]
    fn a_failure_left_by_the_prolog_is_the_answer_without_an_agent() {
        let d = std::env::temp_dir().join(format!("syndeo-client-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(FAILED_FILE), "site config is invalid").unwrap();
        let r = wait_ready(&d.join("agent.sock"), Duration::from_secs(5)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(r, WaitReply::Failed { error: "site config is invalid".into() });
    }

    /// The first "agent" takes the request and ends without answering; the
    /// second, on the same socket path (as its supervisor restarts it),
    /// answers: the step gets the cluster.
    #[test]
    fn a_step_waiting_on_an_agent_that_is_restarted_gets_the_new_agents_answer() {
        let d = std::env::temp_dir().join(format!("syndeo-client-restart-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let sock = d.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let path = sock.clone();
        let agents = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = String::new();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
            drop((s, listener));
            std::fs::remove_file(&path).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            let (mut s, _) = listener.accept().unwrap();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
            s.write_all(b"{\"state\":\"ready\",\"env\":{\"RAY_ADDRESS\":\"10.0.0.2:6379\"}}\n").unwrap();
        });
        let r = wait_ready(&sock, Duration::from_secs(20));
        agents.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        match r.unwrap() {
            WaitReply::Ready { env } => assert_eq!(env["RAY_ADDRESS"], "10.0.0.2:6379"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_agent_that_ends_while_a_step_waits_and_does_not_come_back_is_named_as_gone() {
        let d = std::env::temp_dir().join(format!("syndeo-client-eof-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let sock = d.join("agent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        // The "agent" takes the request and ends without answering.
        let agent = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = String::new();
            BufReader::new(&mut s).read_line(&mut req).unwrap();
        });
        let e = wait_ready(&sock, Duration::from_secs(2)).unwrap_err();
        agent.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(e.contains("ended before the cluster was ready") && e.contains("did not come back"), "{e}");
    }

    #[test]
    fn missing_socket_fails_within_the_timeout() {
        let e = wait_ready(Path::new("/nonexistent/agent.sock"), Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("cannot reach the node agent"), "{e}");
    }
}
