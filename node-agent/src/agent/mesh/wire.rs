//! The one place where the mesh's protobuf messages (`pb`, generated from
//! proto/mesh.proto) and the agent's own types (`cluster.rs`) meet: one
//! encoder and one decoder per message. Nothing outside `mesh/` sees `pb`.
use super::pb;
use super::pb::cluster_view::Phase as PbPhase;
use super::pb::join_reply::Role as PbRole;
use crate::agent::cluster::{ClusterView, JoinAnswer, PeerRole, Phase};
use crate::fault::{Fault, NODE_FAULT};

/// A fault in a message field: its text, which says "node fault:" first
/// for a node's.
pub fn encode_fault(f: &Fault) -> String {
    f.to_string()
}

/// A message field's fault: a node's if it says so first, else said as is.
pub fn decode_fault(message: String) -> Fault {
    match message.strip_prefix(NODE_FAULT) {
        Some(m) => Fault::Node(m.to_string()),
        None => Fault::User(message),
    }
}

impl From<&ClusterView> for pb::ClusterView {
    fn from(v: &ClusterView) -> pb::ClusterView {
        let (phase, message) = match &v.phase {
            Phase::Starting => (PbPhase::Starting, String::new()),
            Phase::HeadReady => (PbPhase::HeadReady, String::new()),
            Phase::Ready => (PbPhase::Ready, String::new()),
            Phase::Failed(f) => (PbPhase::Failed, encode_fault(f)),
            Phase::Reelect(why) => (PbPhase::Reelect, why.clone()),
        };
        pb::ClusterView {
            phase: phase as i32,
            head_node: v.head_node.clone(),
            gcs_address: v.gcs_address.clone(),
            message,
            ready_nodes: v.ready_nodes.clone(),
            dashboard_url: v.dashboard_url.clone(),
            ray_token: v.ray_token.clone(),
            memory_mb: v.memory_mb.iter().map(|(n, mb)| (n.clone(), *mb)).collect(),
            job_stderr: v.job_stderr.clone(),
            ready_hostlist: v.ready_hostlist.clone(),
            dashboard_note: v.dashboard_note.clone(),
        }
    }
}

impl From<pb::ClusterView> for ClusterView {
    fn from(v: pb::ClusterView) -> ClusterView {
        // An unknown phase number reads as STARTING, as prost reads it.
        let phase = match v.phase() {
            PbPhase::Starting => Phase::Starting,
            PbPhase::HeadReady => Phase::HeadReady,
            PbPhase::Ready => Phase::Ready,
            PbPhase::Failed => Phase::Failed(decode_fault(v.message)),
            PbPhase::Reelect => Phase::Reelect(v.message),
        };
        ClusterView {
            phase,
            head_node: v.head_node,
            gcs_address: v.gcs_address,
            ready_nodes: v.ready_nodes,
            ready_hostlist: v.ready_hostlist,
            dashboard_url: v.dashboard_url,
            dashboard_note: v.dashboard_note,
            ray_token: v.ray_token,
            memory_mb: v.memory_mb.into_iter().collect(),
            job_stderr: v.job_stderr,
        }
    }
}

/// Join's reply from the agent on `own_node`.
pub fn encode_join(answer: &JoinAnswer, own_node: &str) -> pb::JoinReply {
    let (role, head_node) = match &answer.role {
        PeerRole::Undecided => (PbRole::Undecided, String::new()),
        PeerRole::Head => (PbRole::Head, own_node.to_string()),
        PeerRole::Follower(h) => (PbRole::Follower, h.clone()),
        PeerRole::SteppedDown => (PbRole::SteppedDown, String::new()),
    };
    pb::JoinReply { role: role as i32, head_node, failed: answer.failed.as_ref().map(encode_fault).unwrap_or_default() }
}

pub fn decode_join(reply: pb::JoinReply) -> JoinAnswer {
    let role = match reply.role() {
        PbRole::Undecided => PeerRole::Undecided,
        PbRole::Head => PeerRole::Head,
        PbRole::Follower => PeerRole::Follower(reply.head_node),
        PbRole::SteppedDown => PeerRole::SteppedDown,
    };
    JoinAnswer { role, failed: (!reply.failed.is_empty()).then(|| decode_fault(reply.failed)) }
}

/// A worker's report for the job's cluster `job_id`: its Ray joined (Ok),
/// or why it could not.
pub fn encode_report(job_id: u32, node: &str, result: &Result<(), Fault>) -> pb::NodeReport {
    let message = result.as_ref().err().map(encode_fault).unwrap_or_default();
    pb::NodeReport { job_id, node: node.to_string(), ok: result.is_ok(), message }
}

pub fn decode_report(r: pb::NodeReport) -> (String, Result<(), Fault>) {
    (r.node, if r.ok { Ok(()) } else { Err(decode_fault(r.message)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(phase: Phase) -> ClusterView {
        ClusterView {
            phase,
            head_node: "node0001".into(),
            gcs_address: "10.0.0.1:6379".into(),
            ready_nodes: vec!["node0001".into(), "node0002".into()],
            ready_hostlist: "node[0001-0002]".into(),
            dashboard_url: "http://10.0.0.1:8265".into(),
            dashboard_note: "none here".into(),
            ray_token: "t".into(),
            memory_mb: [("node0002".to_string(), 4096)].into(),
            job_stderr: "/home/u/slurm-1.err".into(),
        }
    }

    #[test]
    fn every_phase_of_a_view_comes_back_from_the_wire_as_it_went() {
        for phase in [
            Phase::Starting,
            Phase::HeadReady,
            Phase::Ready,
            Phase::Failed(Fault::user("why")),
            Phase::Failed(Fault::node("no random token")),
            Phase::Reelect("it stepped down".into()),
        ] {
            let v = view(phase);
            assert_eq!(ClusterView::from(pb::ClusterView::from(&v)), v);
        }
    }

    #[test]
    fn a_failed_or_abandoned_phase_says_why_in_the_message_field_and_only_they_do() {
        let failed = pb::ClusterView::from(&view(Phase::Failed(Fault::node("why"))));
        assert_eq!((failed.phase(), failed.message.as_str()), (PbPhase::Failed, "node fault: why"));
        let ready = pb::ClusterView { message: "stale".into(), ..pb::ClusterView::from(&view(Phase::Ready)) };
        assert_eq!(ClusterView::from(ready).phase, Phase::Ready);
    }

    /// A fault's kind crosses the wire in its text, as the job's steps read
    /// it: a node's says so first; a summary that names node faults inside
    /// stays a summary.
    #[test]
    fn a_faults_kind_comes_back_from_the_wire_as_it_went() {
        for f in [
            Fault::node("the container runtime bubblewrap (/x) is not installed on this node"),
            Fault::user("image /x does not exist"),
            Fault::user("node2: node fault: no bwrap; node3: its agent stopped answering"),
        ] {
            assert_eq!(decode_fault(encode_fault(&f)), f);
        }
        assert_eq!(encode_fault(&Fault::node("x")), "node fault: x");
    }

    #[test]
    fn joins_answers_come_back_from_the_wire_as_they_went() {
        for role in [PeerRole::Undecided, PeerRole::Head, PeerRole::Follower("n1".into()), PeerRole::SteppedDown] {
            for failed in [None, Some(Fault::user("the cluster failed")), Some(Fault::node("no token"))] {
                let answer = JoinAnswer { role: role.clone(), failed };
                assert_eq!(decode_join(encode_join(&answer, "n2")), answer);
            }
        }
        assert_eq!(encode_join(&JoinAnswer { role: PeerRole::Head, failed: None }, "n2").head_node, "n2");
    }

    #[test]
    fn reports_come_back_from_the_wire_as_they_went() {
        for result in [Ok(()), Err(Fault::user("its Ray could not start")), Err(Fault::node("no bwrap"))] {
            let wire = encode_report(7, "n2", &result);
            assert_eq!(wire.job_id, 7);
            assert_eq!(decode_report(wire), ("n2".to_string(), result));
        }
    }
}
