//! The cluster view: the head's account of the cluster (phase, addresses,
//! token, ready nodes), what the workers receive of it, and this node's state
//! derived from it. Both roles and the mesh's RPC handlers use these; none of
//! them holds role logic.
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::cluster::{ClusterView, NodeState, Phase};
use super::state::{Role, Shared};
use crate::fault::Fault;

/// Changes the view, sends the workers' copy if it changed, and derives this
/// node's state from it.
pub fn publish(shared: &Shared, f: impl FnOnce(&mut ClusterView)) {
    shared.view.send_modify(f);
    let light = broadcast_view(&shared.view.borrow());
    shared.broadcast.send_if_modified(|b| {
        let changed = *b != light;
        *b = light;
        changed
    });
    sync_node_state(shared);
}

/// The cluster failed: the view says so, with why.
pub fn publish_failure(shared: &Shared, fault: &Fault) {
    publish(shared, |v| v.phase = Phase::Failed(fault.clone()));
}

/// The view as workers receive it: no per-node lists, and the ready nodes
/// as one hostlist expression once the cluster is ready.
pub fn broadcast_view(v: &ClusterView) -> ClusterView {
    let ready = v.phase == Phase::Ready;
    ClusterView {
        phase: v.phase.clone(),
        head_node: v.head_node.clone(),
        gcs_address: v.gcs_address.clone(),
        ready_nodes: Vec::new(),
        dashboard_url: v.dashboard_url.clone(),
        dashboard_note: v.dashboard_note.clone(),
        ray_token: v.ray_token.clone(),
        memory_mb: Default::default(),
        job_stderr: v.job_stderr.clone(),
        ready_hostlist: if ready { crate::hostlist::compress(&v.ready_nodes) } else { String::new() },
    }
}

/// This node's state follows the cluster view (and its own Ray's state).
pub fn sync_node_state(shared: &Shared) {
    let state = {
        let v = shared.view.borrow();
        let node = &shared.spec.node;
        match &v.phase {
            Phase::Failed(f) => NodeState::Failed(f.clone()),
            // A worker knows it joined (it told the head); the head has the list.
            Phase::Ready if shared.has_joined() || v.ready_nodes.contains(node) => NodeState::Ready,
            Phase::Ready => NodeState::Starting(format!("the cluster is ready; {node}'s Ray has not joined it yet")),
            // The head counts the nodes that join (`recount`); workers hear of them once ready.
            Phase::HeadReady if v.head_node == *node => {
                NodeState::Starting("the head is up; waiting for the workers".into())
            }
            Phase::HeadReady => NodeState::Starting("the head is up; this node's Ray is joining it".into()),
            Phase::Starting => NodeState::Starting("the head is starting Ray".into()),
            Phase::Reelect(why) => NodeState::Starting(format!("electing another head: {why}")),
        }
    };
    match state {
        NodeState::Failed(m) => shared.fail(m),
        s => shared.set_state(s),
    }
}

/// Head: derive the cluster's phase from its own Ray and the workers'
/// reports. O(nodes) per report; the list of ready nodes (in the job's
/// order) is built only once the cluster is ready.
pub async fn recount(shared: &Shared) {
    let reports = shared.reports.lock().await;
    recount_with(shared, &reports);
}

/// A worker's report: recorded and counted under one lock, so that each
/// report is counted once and the ready list is built once, not per report.
pub async fn record_report(shared: &Shared, node: String, result: Result<(), Fault>) {
    let mut reports = shared.reports.lock().await;
    if reports.get(&node) == Some(&result) {
        return;
    }
    reports.insert(node, result);
    recount_with(shared, &reports);
}

/// Nodes whose Ray joined: the head's own, and each worker that reported Ok.
pub fn joined(reports: &BTreeMap<String, Result<(), Fault>>) -> usize {
    1 + reports.values().filter(|r| r.is_ok()).count()
}

fn recount_with(shared: &Shared, reports: &BTreeMap<String, Result<(), Fault>>) {
    if *shared.role.borrow() != Role::Head {
        return;
    }
    let spec = &shared.spec;
    let phase = shared.view.borrow().phase.clone();
    if matches!(phase, Phase::Failed(_) | Phase::Starting | Phase::Reelect(_)) {
        return;
    }
    let joined = joined(reports);
    let failed = reports.values().filter(|r| r.is_err()).count();
    if joined >= spec.min_nodes() && phase != Phase::Ready && !shared.settled.load(Ordering::Acquire) {
        // Ready waits until Ray itself lists the nodes (head::settle).
        shared.all_joined.notify_one();
        shared.set_state(NodeState::Starting(format!("{joined} nodes joined; waiting for Ray to list them active")));
    } else if joined >= spec.min_nodes() || phase == Phase::Ready {
        let ready: Vec<String> = spec
            .nodes
            .iter()
            .filter(|n| **n == spec.node || matches!(reports.get(*n), Some(Ok(()))))
            .cloned()
            .collect();
        publish(shared, |v| {
            v.ready_nodes = ready;
            v.phase = Phase::Ready;
        });
    } else if spec.nodes.len() - failed < spec.min_nodes() {
        let why: Vec<String> =
            reports.iter().filter_map(|(n, r)| r.as_ref().err().map(|m| format!("{n}: {m}"))).collect();
        publish_failure(shared, &Fault::user(why.join("; ")));
    } else {
        shared.set_state(NodeState::Starting(format!("{joined} of {} nodes joined", spec.nodes.len())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(phase: Phase, nodes: usize) -> ClusterView {
        ClusterView {
            phase,
            head_node: "node0001".into(),
            gcs_address: "10.0.0.1:6379".into(),
            ray_token: "t".into(),
            ready_nodes: (1..=nodes).map(|i| format!("node{i:04}")).collect(),
            memory_mb: (1..=nodes).map(|i| (format!("node{i:04}"), 4096)).collect(),
            ..Default::default()
        }
    }

    /// What a worker receives costs the same for 4,096 nodes as for 4: no
    /// per-node list; the ready nodes come as one hostlist expression, and
    /// only once the cluster is ready.
    #[test]
    fn workers_views_carry_no_per_node_lists_only_a_hostlist_once_ready() {
        let starting = broadcast_view(&view(Phase::HeadReady, 4096));
        assert!(starting.ready_nodes.is_empty() && starting.memory_mb.is_empty());
        assert_eq!(starting.ready_hostlist, "");
        assert_eq!((starting.gcs_address.as_str(), starting.ray_token.as_str()), ("10.0.0.1:6379", "t"));
        let ready = broadcast_view(&view(Phase::Ready, 4096));
        assert!(ready.ready_nodes.is_empty() && ready.memory_mb.is_empty());
        assert_eq!(ready.ready_hostlist, "node[0001-4096]");
        assert_eq!(crate::hostlist::expand(&ready.ready_hostlist).unwrap(), view(Phase::Ready, 4096).ready_nodes);
    }
}
