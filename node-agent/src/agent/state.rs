//! What one agent knows and shares between its tasks: the job, its role in
//! the election, the cluster view (authoritative on the head, a mirror on
//! workers), this node's own state, and its Ray; and, on the head only, what
//! the head keeps for its workers (`HeadCluster`). What a worker keeps is its
//! driver's own (`worker.rs`).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{watch, Mutex};

use super::cluster::{ClusterView, NodeState};
use super::launcher::{Launcher, RayNode};
use crate::fault::Fault;
use crate::job::JobSpec;
use crate::runtime::{self, ContainerRuntime};

/// This node's part in the election: the election's states, beside the
/// cluster's own (`cluster::Phase`, in the view).
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// Electing a head (first, or again after the head dropped out).
    Undecided,
    /// This node is the head (its `HeadCluster`: `Shared::head`).
    Head,
    /// This node follows that head: a worker.
    Follower(String),
    /// It was head, and its Ray failed before the cluster was ready: the
    /// others elect again without it, and it rejoins as a worker.
    SteppedDown,
}

impl Role {
    /// For `syndeo status`.
    pub fn describe(&self) -> String {
        match self {
            Role::Undecided => "electing a head".into(),
            Role::Head => "head".into(),
            Role::Follower(h) => format!("worker of {h}"),
            Role::SteppedDown => "stepped down as head; rejoining as a worker".into(),
        }
    }
}

/// What only a head keeps, and its mesh serves the workers from; made when
/// this node becomes head (`Shared::become_head`).
pub struct HeadCluster {
    /// What the workers' Watch streams carry, the view without its per-node
    /// lists (see `ClusterView::ready_hostlist`); it changes only when the
    /// phase or the cluster's addresses do, a few times per job.
    pub broadcast: watch::Sender<ClusterView>,
    /// Each worker's report (Ok, or why its Ray could not join).
    pub reports: Mutex<BTreeMap<String, Result<(), Fault>>>,
    /// How far the last step to Ready has come.
    pub settle: watch::Sender<Settle>,
}

/// The head's last step to Ready: once enough nodes joined, Ray's own
/// status is to list them (`head::settle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Not enough nodes joined yet.
    Joining,
    /// Enough joined: Ray's status is asked to list them.
    Listing,
    /// Ray's status listed them (or the wait gave up): the cluster may be Ready.
    Settled,
}

impl HeadCluster {
    fn new() -> Arc<HeadCluster> {
        Arc::new(HeadCluster {
            broadcast: watch::channel(ClusterView::default()).0,
            reports: Mutex::new(BTreeMap::new()),
            settle: watch::channel(Settle::Joining).0,
        })
    }
}

pub struct Shared {
    pub spec: JobSpec,
    pub runtime: Box<dyn ContainerRuntime>,
    pub launcher: Arc<dyn Launcher>,
    pub role: watch::Sender<Role>,
    pub view: watch::Sender<ClusterView>,
    pub node_state: watch::Sender<NodeState>,
    /// Set once this node became head (a head that steps down is passed
    /// over for good, so there is at most one term); it stays for the
    /// streams its workers still hold.
    head: OnceLock<Arc<HeadCluster>>,
    pub ray: Mutex<Option<Box<dyn RayNode>>>,
    /// The job's nodes, for lookups (the head's; made on first use).
    node_set: OnceLock<BTreeSet<String>>,
    /// This agent is the Nth start after one ended unexpectedly, and how it
    /// ended: it rejoins as a worker, and says so once in the job's stderr.
    pub restart: Option<(u32, String)>,
    restart_told: AtomicBool,
    /// The job was told its cluster has no authentication (old Ray), once.
    pub open_cluster_told: AtomicBool,
    /// The job was told its nodes carry no Slurm labels (old Ray), once.
    pub no_labels_told: AtomicBool,
    /// What the image's Ray is on this node, once it loaded.
    pub image_ray: std::sync::Mutex<Option<super::ray_version::ImageRay>>,
}

impl Shared {
    pub fn new(spec: JobSpec, launcher: Arc<dyn Launcher>) -> Shared {
        Shared {
            runtime: runtime::from_config(&spec.config),
            launcher,
            role: watch::channel(Role::Undecided).0,
            view: watch::channel(ClusterView::default()).0,
            node_state: watch::channel(NodeState::Starting("electing a head".into())).0,
            head: OnceLock::new(),
            ray: Mutex::new(None),
            restart: None,
            restart_told: AtomicBool::new(false),
            open_cluster_told: AtomicBool::new(false),
            no_labels_told: AtomicBool::new(false),
            image_ray: std::sync::Mutex::new(None),
            node_set: OnceLock::new(),
            spec,
        }
    }

    pub fn set_state(&self, s: NodeState) {
        self.node_state.send_if_modified(|cur| {
            // A failure is final.
            if matches!(cur, NodeState::Failed(_)) || *cur == s {
                return false;
            }
            *cur = s;
            true
        });
    }

    pub fn fail(&self, fault: Fault) {
        tracing::error!("{fault}");
        self.set_state(NodeState::Failed(fault));
    }

    /// The nodes in the ready cluster: the head's own list, or on a worker
    /// the head's hostlist expression of it, expanded.
    pub fn ready_nodes(&self) -> Vec<String> {
        let v = self.view.borrow();
        if !v.ready_nodes.is_empty() {
            return v.ready_nodes.clone();
        }
        crate::hostlist::expand(&v.ready_hostlist).unwrap_or_default()
    }

    /// Whether `node` is one of the job's nodes (O(log N): reports from all
    /// of a large job's nodes are checked).
    pub fn is_node(&self, node: &str) -> bool {
        self.node_set.get_or_init(|| self.spec.nodes.iter().cloned().collect()).contains(node)
    }

    /// This node is the head from now on: its head state first, then the
    /// role the mesh answers Join and Watch by.
    pub fn become_head(&self) -> Arc<HeadCluster> {
        let head = self.head.get_or_init(HeadCluster::new).clone();
        self.role.send_replace(Role::Head);
        head
    }

    /// What this node keeps as head, once it became head.
    pub fn head(&self) -> Option<&Arc<HeadCluster>> {
        self.head.get()
    }

    /// The one-line notice of this agent's restart, the first time only.
    pub fn restart_notice(&self) -> Option<String> {
        let (n, how) = self.restart.as_ref()?;
        if self.restart_told.swap(true, Ordering::Relaxed) {
            return None;
        }
        let node = &self.spec.node;
        Some(format!(
            "syndeo: the node agent on {node} {how}; it was restarted ({n} of {}) and {node} rejoined the cluster",
            crate::supervisor::MAX_RESTARTS
        ))
    }

    /// Variables a job step gets once the cluster is ready.
    pub fn step_env(&self) -> BTreeMap<String, String> {
        let v = self.view.borrow().clone();
        let s = &self.spec;
        let mut env = BTreeMap::new();
        env.insert("RAY_ADDRESS".into(), v.gcs_address.clone());
        env.insert("RAY_AUTH_MODE".into(), "token".into());
        env.insert("RAY_AUTH_TOKEN".into(), v.ray_token.clone());
        env.insert("RAY_USAGE_STATS_ENABLED".into(), "0".into());
        env.insert(syndeo_protocol::env::JOB_DIR.into(), s.job_dir.display().to_string());
        env.insert("SYNDEO_HEAD".into(), v.head_node.clone());
        env.insert("SYNDEO_NODES".into(), self.ready_nodes().join(","));
        if !v.dashboard_url.is_empty() {
            env.insert("SYNDEO_DASHBOARD_URL".into(), v.dashboard_url.clone());
        }
        // The plugin puts it before the step's own PYTHONPATH (driver_hook.rs).
        env.insert("PYTHONPATH".into(), s.dir().python_hook().display().to_string());
        env
    }
}
