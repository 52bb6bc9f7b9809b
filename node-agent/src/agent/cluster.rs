//! The cluster as this agent holds it, in its own types: the view the head
//! publishes (its phase, addresses, token, nodes), this node's state as the
//! job's steps see it, and a peer's answer to Join. Plain data: `view.rs`
//! derives and publishes it, and only the mesh (`mesh/wire.rs`) knows its
//! form on the wire.
//!
//! A failure stays a typed `Fault` until it becomes a step's message or the
//! mesh's: `Fault::Node` for what a node's admins must mend (said with
//! "node fault:"), `Fault::User` for everything else, said as is: the user's
//! mistake, or what befell the job's cluster (a timeout, lost nodes, the job
//! ending, several nodes' failures summed up with their own kinds in the text).
use std::collections::BTreeMap;

use crate::fault::Fault;

/// The cluster's phase, as the head publishes it; each phase carries what
/// only it has.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Phase {
    /// The head's Ray is starting.
    #[default]
    Starting,
    /// Workers may start: the view's `gcs_address` is set.
    HeadReady,
    /// Enough nodes joined.
    Ready,
    /// The cluster failed, and why.
    Failed(Fault),
    /// The head's Ray failed before the cluster was ready (and why): the
    /// others elect another head without it; it rejoins as a worker.
    Reelect(String),
}

/// The head's account of the cluster: authoritative on the head, a mirror
/// of what the head sends on workers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterView {
    pub phase: Phase,
    pub head_node: String,
    /// The head's GCS, once it listens (before `HeadReady`).
    pub gcs_address: String,
    /// The head's: the ready nodes in the job's order, once ready.
    pub ready_nodes: Vec<String>,
    /// A worker's: the ready nodes as one hostlist expression, once ready.
    pub ready_hostlist: String,
    pub dashboard_url: String,
    /// Why the cluster has no dashboard, when it has none.
    pub dashboard_note: String,
    /// The cluster's Ray auth token, made at random by the head's agent.
    pub ray_token: String,
    /// Memory (MiB) Slurm allocated to the job per node: every node's on
    /// the head, the receiving node's only on a worker.
    pub memory_mb: BTreeMap<String, u64>,
    /// The job's stderr file, for one-line notices; empty if unknown.
    pub job_stderr: String,
}

/// This node's state as the job's steps see it.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeState {
    Starting(String),
    Ready,
    Failed(Fault),
}

/// A peer's part in the election, as its agent answers Join.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerRole {
    /// Still looking for a lower-ranked head: ask again.
    Undecided,
    /// It is the head.
    Head,
    /// It follows this head.
    Follower(String),
    /// Its Ray failed as head before the cluster was ready: pass over it.
    SteppedDown,
}

/// A peer agent's answer to Join.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinAnswer {
    pub role: PeerRole,
    /// Set when the job's cluster failed on that node: why. An agent that
    /// rejoins after a restart fails with it, instead of waiting for a head.
    pub failed: Option<Fault>,
}
