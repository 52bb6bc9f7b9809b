//! What one agent knows and shares between its tasks: the job, its role in
//! the election, the cluster view (authoritative on the head, a mirror on
//! workers), this node's own state, and the Ray container.
use std::collections::BTreeMap;

use tokio::sync::{watch, Mutex};

use super::mesh::pb::ClusterView;
use super::ray::RayProcess;
use crate::job::JobSpec;
use crate::runtime::{self, ContainerRuntime};

#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    Undecided,
    Head,
    Follower(String),
    /// Its Ray failed as head before the cluster was ready: electing again
    /// without itself, to rejoin as a worker.
    Out,
}

/// This node's state as job steps see it.
#[derive(Debug, Clone, PartialEq)]
pub enum Local {
    Starting(String),
    Ready,
    Failed(String),
}

pub struct Shared {
    pub spec: JobSpec,
    pub runtime: Box<dyn ContainerRuntime>,
    pub mesh_token: String,
    pub role: watch::Sender<Role>,
    pub view: watch::Sender<ClusterView>,
    pub local: watch::Sender<Local>,
    /// Head only: each worker's report (Ok, or why its Ray could not join).
    pub reports: Mutex<BTreeMap<String, Result<(), String>>>,
    pub ray: Mutex<Option<RayProcess>>,
}

impl Shared {
    pub fn new(spec: JobSpec, mesh_token: String) -> Shared {
        let runtime = runtime::from_config(&spec.config);
        Shared {
            runtime,
            mesh_token,
            role: watch::channel(Role::Undecided).0,
            view: watch::channel(ClusterView::default()).0,
            local: watch::channel(Local::Starting("electing a head".into())).0,
            reports: Mutex::new(BTreeMap::new()),
            ray: Mutex::new(None),
            spec,
        }
    }

    pub fn set_local(&self, l: Local) {
        self.local.send_if_modified(|cur| {
            // A failure is final.
            if matches!(cur, Local::Failed(_)) || *cur == l {
                return false;
            }
            *cur = l;
            true
        });
    }

    pub fn fail(&self, msg: impl Into<String>) {
        let msg = msg.into();
        tracing::error!("{msg}");
        self.set_local(Local::Failed(msg));
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
        env.insert("SYNDEO_JOB_DIR".into(), s.job_dir.display().to_string());
        env.insert("SYNDEO_HEAD".into(), v.head_node.clone());
        env.insert("SYNDEO_NODES".into(), v.ready_nodes.join(","));
        if !v.dashboard_url.is_empty() {
            env.insert("SYNDEO_DASHBOARD_URL".into(), v.dashboard_url.clone());
        }
        env
    }
}
