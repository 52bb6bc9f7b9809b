//! The node agent's local socket (`<job dir>/agent.sock`, in the user's 0700
//! job directory): one JSON request line, one JSON reply line.
//!
//! ```text
//! {"v":1,"op":"wait","timeout_secs":N} -> {"v":1,"state":"ready","env":{..}} | {"state":"failed","error":..} | {"state":"starting","detail":..}
//! {"v":1,"op":"status"}                -> {"v":1,"job":..,"node":..,"state":..,...}
//! {"v":1,"op":"exec_spec","cwd":P}     -> {"v":1,"argv":[..]} | {"v":1,"error":..}
//! ```
//!
//! Every message carries the protocol version `v`. An agent keeps running
//! across a package upgrade, so a new plugin or CLI may talk to an older
//! agent, and the other way round: each side accepts any version from
//! [`MIN_VERSION`] to its own [`VERSION`], reads what it knows and ignores
//! fields it does not. A version outside that range is refused with a
//! message that says which versions meet. Messages without `v` come from
//! syndeo before versioning (version 0), which spoke this same protocol.
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The version this build speaks.
pub const VERSION: u32 = 1;
/// The oldest version this build still understands.
pub const MIN_VERSION: u32 = 0;
/// A request or reply line longer than this is refused (it is not ours).
pub const MAX_LINE: usize = 64 * 1024;

/// A request, as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    #[serde(default)]
    pub v: u32,
    #[serde(flatten)]
    pub op: Op,
}

impl Request {
    pub fn new(op: Op) -> Request {
        Request { v: VERSION, op }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Answer once the cluster is ready or has failed, or after `timeout_secs`.
    Wait { timeout_secs: u64 },
    /// The node's and the cluster's state, now.
    Status,
    /// The command prefix that runs a program in the job's image, in `cwd`.
    ExecSpec { cwd: Option<PathBuf> },
}

/// The answer to [`Op::Wait`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum WaitReply {
    /// The cluster is up: set these variables in the step's environment.
    Ready { env: BTreeMap<String, String> },
    /// The cluster cannot come up; `error` says why and what to do.
    Failed { error: String },
    /// Still starting when the wait ran out.
    Starting { detail: String },
}

/// The answer to [`Op::Status`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusReply {
    pub job: u32,
    pub node: String,
    /// This node's part: "head", "worker of NODE", "electing", ...
    pub role: String,
    /// "starting", "ready" or "failed".
    pub state: String,
    pub detail: String,
    pub head: String,
    pub ray_address: String,
    pub nodes: Vec<String>,
    pub ready_nodes: Vec<String>,
    pub dashboard_url: String,
    /// Why there is no dashboard, when there is none.
    #[serde(default)]
    pub dashboard_note: String,
    pub runtime: String,
    /// The image's Ray and Python on this node, once its Ray loaded.
    pub ray_version: String,
    pub python_version: String,
}

/// The answer to [`Op::ExecSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ExecSpecReply {
    /// The container command, and variables for the runtime's own process.
    Argv {
        argv: Vec<String>,
        #[serde(default)]
        env: Vec<(String, String)>,
    },
    Error {
        error: String,
    },
}

/// A reply line: the version of the side that answered, and the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply<T> {
    #[serde(default)]
    pub v: u32,
    #[serde(flatten)]
    pub body: T,
}

impl<T> Reply<T> {
    pub fn new(body: T) -> Reply<T> {
        Reply { v: VERSION, body }
    }
}

/// Whether a peer speaking `v` can be understood; if not, a message for the
/// user that names both versions.
pub fn check_version(v: u32, peer: &str) -> Result<(), String> {
    if (MIN_VERSION..=VERSION).contains(&v) {
        return Ok(());
    }
    Err(format!(
        "the {peer} speaks protocol version {v}, and this syndeo understands {MIN_VERSION} to {VERSION}: \
         the node runs two syndeo releases at once; the job's agent came from the other one. \
         Finish the upgrade on every node (and restart jobs started before it)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_version_and_the_operation() {
        let line = serde_json::to_string(&Request::new(Op::Wait { timeout_secs: 5 })).unwrap();
        assert_eq!(line, r#"{"v":1,"op":"wait","timeout_secs":5}"#);
        let exec: Request = serde_json::from_str(r#"{"v":1,"op":"exec_spec","cwd":"/w"}"#).unwrap();
        assert_eq!(exec.op, Op::ExecSpec { cwd: Some("/w".into()) });
    }

    #[test]
    fn messages_without_a_version_are_version_0_and_still_understood() {
        let r: Request = serde_json::from_str(r#"{"op":"status"}"#).unwrap();
        assert_eq!((r.v, r.op), (0, Op::Status));
        let w: Reply<WaitReply> = serde_json::from_str(r#"{"state":"ready","env":{"RAY_ADDRESS":"a:1"}}"#).unwrap();
        assert_eq!(w.v, 0);
        assert!(matches!(w.body, WaitReply::Ready { env } if env["RAY_ADDRESS"] == "a:1"));
        assert!(check_version(0, "agent").is_ok());
    }

    #[test]
    fn unknown_fields_from_a_newer_peer_are_ignored() {
        let s: Reply<StatusReply> =
            serde_json::from_str(r#"{"v":1,"job":7,"state":"ready","some_future_field":[1,2]}"#).unwrap();
        assert_eq!((s.body.job, s.body.state.as_str()), (7, "ready"));
    }

    #[test]
    fn a_version_from_the_future_is_refused_naming_both_versions() {
        let e = check_version(VERSION + 1, "node agent").unwrap_err();
        assert!(e.contains(&format!("version {}", VERSION + 1)) && e.contains("upgrade"), "{e}");
    }

    #[test]
    fn exec_spec_replies_are_a_command_or_an_error() {
        let a: Reply<ExecSpecReply> = serde_json::from_str(r#"{"v":1,"argv":["bwrap","--"]}"#).unwrap();
        assert_eq!(a.body, ExecSpecReply::Argv { argv: vec!["bwrap".into(), "--".into()], env: vec![] });
        let e: Reply<ExecSpecReply> = serde_json::from_str(r#"{"v":1,"error":"no image"}"#).unwrap();
        assert_eq!(e.body, ExecSpecReply::Error { error: "no image".into() });
    }
}
