//! What a node's part in the cluster (head or worker) hands back to the
//! lifecycle when it ends, and what the lifecycle hands it to start with.
use std::collections::BTreeMap;

use tokio::sync::mpsc;

use super::launcher::Event;
use super::ray::NodePorts;
use crate::fault::Fault;

/// How this node's part as head or worker ended (it runs until then).
#[derive(Debug)]
pub enum End {
    /// The job's cluster failed: why, and what to do.
    Failed(Fault),
    /// Before the cluster was ready, `head` dropped out: its Ray failed (its
    /// agent lives on and rejoins as a worker), or its agent is gone (`lost`).
    /// Elect again without it.
    Reelect { head: String, lost: bool, why: String },
}

impl From<Fault> for End {
    fn from(f: Fault) -> End {
        End::Failed(f)
    }
}

/// Heads that dropped out before the cluster was ready, and why; `lost`:
/// their agent is gone, so their node will not join either.
pub type Dropped = BTreeMap<String, (bool, String)>;

/// This node's Ray container, started (and loading Ray) before the election
/// ended: its launcher's events and its ports; or why it could not start.
pub type Prepared = Result<(mpsc::Receiver<Event>, NodePorts), Fault>;
