//! The cluster view: the head's account of the cluster (phase, addresses,
//! token, ready nodes), what the workers receive of it, and this node's state
//! derived from it. Both roles and the mesh's RPC handlers use these; none of
//! them holds role logic.
use std::collections::BTreeMap;

use super::cluster::{ClusterView, NodeState, Phase};
use super::state::{HeadCluster, Role, Settle, Shared};
use crate::fault::Fault;

/// Changes the view, sends the workers' copy if it changed (a node that
/// never was head has no workers), and derives this node's state from it.
pub fn publish(shared: &Shared, f: impl FnOnce(&mut ClusterView)) {
    shared.view.send_modify(f);
    if let Some(head) = shared.head() {
        let light = broadcast_view(&shared.view.borrow());
        head.broadcast.send_if_modified(|b| {
            let changed = *b != light;
            *b = light;
            changed
        });
    }
    // The head goes by the view's list of ready nodes, not by a worker's own report.
    sync_node_state(shared, false);
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

/// This node's state follows the cluster view (and its own Ray's state:
/// `joined`, a worker's Ray joined and the head was told so).
pub fn sync_node_state(shared: &Shared, joined: bool) {
    let state = {
        let v = shared.view.borrow();
        let node = &shared.spec.node;
        match &v.phase {
            Phase::Failed(f) => NodeState::Failed(f.clone()),
            // A worker knows it joined (it told the head); the head has the list.
            Phase::Ready if joined || v.ready_nodes.contains(node) => NodeState::Ready,
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
pub async fn recount(shared: &Shared, head: &HeadCluster) {
    let reports = head.reports.lock().await;
    recount_with(shared, head, &reports);
}

/// A worker's report: recorded and counted under one lock, so that each
/// report is counted once and the ready list is built once, not per report.
pub async fn record_report(shared: &Shared, head: &HeadCluster, node: String, result: Result<(), Fault>) {
    let mut reports = head.reports.lock().await;
    if reports.get(&node) == Some(&result) {
        return;
    }
    reports.insert(node, result);
    recount_with(shared, head, &reports);
}

/// Nodes whose Ray joined: the head's own, and each worker that reported Ok.
pub fn joined(reports: &BTreeMap<String, Result<(), Fault>>) -> usize {
    1 + reports.values().filter(|r| r.is_ok()).count()
}

fn recount_with(shared: &Shared, head: &HeadCluster, reports: &BTreeMap<String, Result<(), Fault>>) {
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
    if joined >= spec.min_nodes() && phase != Phase::Ready && *head.settle.borrow() != Settle::Settled {
        // Ready waits until Ray itself lists the nodes (head::settle).
        head.settle.send_if_modified(|s| {
            let listing = *s == Settle::Joining;
            if listing {
                *s = Settle::Listing;
            }
            listing
        });
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
    use std::sync::Arc;

    use super::*;
    use crate::agent::launcher::NoopLauncher;
    use crate::job::simulated_spec;

    /// The head of n1, n2, n3 (all three needed), its Ray up.
    fn head_of_three() -> (Shared, Arc<HeadCluster>) {
        let shared = Shared::new(simulated_spec(11, &["n1", "n2", "n3"], 0), Arc::new(NoopLauncher));
        let head = shared.become_head();
        publish(&shared, |v| {
            v.head_node = "n1".into();
            v.phase = Phase::HeadReady;
        });
        (shared, head)
    }

    #[tokio::test]
    async fn enough_joined_nodes_make_the_cluster_ready_only_once_rays_status_listed_them() {
        let (shared, head) = head_of_three();
        record_report(&shared, &head, "n2".into(), Ok(())).await;
        assert_eq!(*head.settle.borrow(), Settle::Joining);
        record_report(&shared, &head, "n3".into(), Ok(())).await;
        assert_eq!(*head.settle.borrow(), Settle::Listing);
        assert_eq!(shared.view.borrow().phase, Phase::HeadReady, "ready before Ray listed the nodes");
        head.settle.send_replace(Settle::Settled);
        recount(&shared, &head).await;
        assert_eq!(shared.view.borrow().phase, Phase::Ready);
        assert_eq!(*shared.node_state.borrow(), NodeState::Ready);
        assert_eq!(head.broadcast.borrow().ready_hostlist, "n[1-3]");
    }

    /// A worker's node fault fails the cluster with the node named first,
    /// then its fault as the job's steps read it.
    #[tokio::test]
    async fn a_workers_node_fault_fails_the_cluster_saying_whose_and_what() {
        let (shared, head) = head_of_three();
        record_report(&shared, &head, "n2".into(), Err(Fault::node("bwrap is missing"))).await;
        let expected = Fault::user("n2: node fault: bwrap is missing");
        assert_eq!(shared.view.borrow().phase, Phase::Failed(expected.clone()));
        assert_eq!(head.broadcast.borrow().phase, Phase::Failed(expected.clone()));
        assert_eq!(*shared.node_state.borrow(), NodeState::Failed(expected));
    }

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
