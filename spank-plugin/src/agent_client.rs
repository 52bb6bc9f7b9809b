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

/// Asks the agent to answer once the cluster is ready or has failed, waiting
/// at most `timeout`. A missing socket is retried briefly: the prolog returns
/// as soon as the agent has started, and the socket appears right after.
pub fn wait_ready(socket: &Path, timeout: Duration) -> Result<WaitReply, String> {
    if let Some(error) = socket.parent().and_then(|d| std::fs::read_to_string(d.join(FAILED_FILE)).ok()) {
        return Ok(WaitReply::Failed { error });
    }
    let deadline = Instant::now() + timeout;
    let connect_deadline = deadline.min(Instant::now() + Duration::from_secs(10));
    let stream = loop {
        match UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(_) if Instant::now() < connect_deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(format!(
                    "cannot reach the node agent at {}: {e} (the agent is not running: \
                     see its log in the job directory or slurmd's log)",
                    socket.display()
                ))
            }
        }
    };
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let secs = deadline.saturating_duration_since(Instant::now()).as_secs().max(1);
    let request = format!("{{\"op\":\"wait\",\"timeout_secs\":{secs}}}\n");
    writer.write_all(request.as_bytes()).map_err(|e| format!("agent socket: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(secs + 5)))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    let n = BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("no answer from the node agent: {e}"))?;
    if n == 0 {
        return Err(format!(
            "the node agent at {} ended before the cluster was ready (was it killed?); \
             this node cannot run the job's steps: see agent.log in that directory",
            socket.display()
        ));
    }
    parse_reply(&line)
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

    #[test]
    fn an_agent_that_ends_while_a_step_waits_is_named_as_gone() {
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
        let e = wait_ready(&sock, Duration::from_secs(5)).unwrap_err();
        agent.join().unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        assert!(e.contains("ended before the cluster was ready"), "{e}");
    }

    #[test]
    fn missing_socket_fails_within_the_timeout() {
        let e = wait_ready(Path::new("/nonexistent/agent.sock"), Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("cannot reach the node agent"), "{e}");
    }
}
