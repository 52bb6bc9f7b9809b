//! One node's life in the job's cluster: start the container early (Ray's
//! imports overlap the election and the head's start), elect, then run the
//! head's or a worker's part (`head.rs`, `worker.rs`). A head that drops out
//! before the cluster is ready (its Ray failed, or its agent is gone) is
//! passed over and the nodes elect again, each with a fresh container.
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::cluster::{ClusterView, NodeState};
use super::election::{elect, resolve};
use super::mesh::Mesh;
use super::node_ray::{launch, stop_ray};
use super::part::{Dropped, End, Prepared};
use super::state::{Role, Shared};
use super::view::publish_failure;
use super::{head, worker};
use crate::fault::Fault;

pub async fn run(shared: Arc<Shared>, mesh: Arc<Mesh>) {
    if let Err(fault) = node_part(&shared, &mesh, Instant::now()).await {
        shared.fail(fault);
    }
    // Keep serving job steps (and the mesh) until the epilog stops us.
    std::future::pending::<()>().await;
}

/// The rounds of one election each, until the cluster is up (this node's
/// part then runs until the job ends) or has failed.
struct Rounds {
    /// When this round's election began.
    round: Instant,
    /// Nodes not to elect: heads that dropped out.
    passed: BTreeSet<String>,
    dropped: Dropped,
}

async fn node_part(shared: &Arc<Shared>, mesh: &Arc<Mesh>, t0: Instant) -> Result<(), Fault> {
    let node = shared.spec.node.clone();
    // Slurm's NodeAddr for this node (root bound the mesh socket there);
    // the name is resolved only where Slurm gave no address.
    let ip = match shared.spec.addr_of(shared.spec.index) {
        Some(ip) => ip,
        None => {
            resolve(&node).await.map_err(|e| Fault::node(format!("cannot resolve this node's name {node}: {e}")))?
        }
    };
    let mut rounds = Rounds { round: t0, passed: BTreeSet::new(), dropped: Dropped::new() };
    if shared.restart.is_some() {
        // This agent's earlier run (head or worker) ended with its process,
        // and its Ray with it: rejoin the others' cluster as a worker.
        rounds.passed.insert(node.clone());
        shared.role.send_replace(Role::SteppedDown);
        shared.set_state(NodeState::Starting("this node's agent was restarted; it is rejoining the cluster".into()));
    }
    let listener = mesh.listener(ip).await?;
    info!(addr = ?listener.local_addr().ok(), "mesh listening");
    tokio::spawn(mesh.clone().serve(shared.clone(), listener));
    // Ray's address: the site's `network`, else NodeAddr as the mesh's. No
    // match fails this node's part as a failed launch does: the head hears why.
    // The node's interfaces (a netlink dump) are read only when rules need them.
    let rules = &shared.spec.config.network;
    let ifaces = if rules.is_empty() { Vec::new() } else { crate::network::interfaces() };
    let ray_ip = crate::network::choose(rules, &ifaces, ip);
    let ip = *ray_ip.as_ref().unwrap_or(&ip);

    // The user's image is checked as the user; a mistake here fails the job, not the node.
    let mut prepared: Prepared = match ray_ip {
        Ok(_) => launch(shared, ip).await,
        Err(e) => Err(Fault::node(format!("{node}: {e}"))),
    };
    let give_up = t0 + Duration::from_secs(shared.spec.config.startup_timeout);
    loop {
        let end = elect_and_play(shared, mesh, ip, prepared, t0, give_up, &mut rounds).await?;
        let (head, lost, why) = match end {
            End::Failed(fault) => return Err(fault),
            End::Reelect { head, lost, why } => (head, lost, why),
        };
        prepared = prepare_next_round(shared, ip, &mut rounds, head, lost, why).await?;
    }
}

/// One election, and this node's part as its outcome says.
async fn elect_and_play(
    shared: &Arc<Shared>,
    mesh: &Mesh,
    ip: IpAddr,
    prepared: Prepared,
    t0: Instant,
    give_up: Instant,
    rounds: &mut Rounds,
) -> Result<End, Fault> {
    let (role, head_client) = elect(shared, mesh, rounds.round, give_up, &mut rounds.passed).await?;
    Ok(match role {
        Role::Head => {
            // Watchers of the new head must not see a view mirrored from an old one.
            shared.view.send_replace(ClusterView { head_node: shared.spec.node.clone(), ..Default::default() });
            let head = shared.become_head();
            head::run(shared, mesh, head, ip, prepared, t0, &rounds.dropped).await
        }
        Role::Follower(h) => {
            shared.role.send_replace(Role::Follower(h.clone()));
            worker::run(shared, ip, head_client.expect("a follower has a client"), h, prepared).await
        }
        Role::Undecided | Role::SteppedDown => unreachable!("elect decides"),
    })
}

/// `head` dropped out before the cluster was ready: pass over it, and start
/// a fresh container (this node's Ray may have joined the old head's).
async fn prepare_next_round(
    shared: &Arc<Shared>,
    ip: IpAddr,
    rounds: &mut Rounds,
    head: String,
    lost: bool,
    why: String,
) -> Result<Prepared, Fault> {
    warn!(%head, lost, "the head dropped out before the cluster was ready ({why}); electing again without it");
    rounds.passed.insert(head.clone());
    rounds.dropped.insert(head.clone(), (lost, why));
    if rounds.passed.len() >= shared.spec.nodes.len() {
        let each: Vec<String> = rounds.dropped.iter().map(|(n, (_, why))| format!("{n}: {why}")).collect();
        let fault = Fault::user(format!("no node could start the Ray head: {}", each.join("; ")));
        publish_failure(shared, &fault);
        return Err(fault);
    }
    shared.role.send_replace(if head == shared.spec.node { Role::SteppedDown } else { Role::Undecided });
    shared.set_state(NodeState::Starting(format!("the head {head} dropped out; electing another")));
    stop_ray(shared, Duration::from_secs(2)).await;
    rounds.round = Instant::now();
    Ok(launch(shared, ip).await)
}

/// SIGTERM: stop this node's Ray (gracefully, then by force).
pub async fn stop(shared: &Shared) {
    stop_ray(shared, Duration::from_secs(shared.spec.config.stop_grace.saturating_sub(3).max(2))).await;
}
