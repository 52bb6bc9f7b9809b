//! Head election: the head is the first node, in the job's node-list order,
//! whose agent answers. Each agent asks the nodes ranked before it in turn;
//! a node that has not answered by its window's end (`head_timeout` per rank
//! from the agent's start) is passed over. An agent that passes over every
//! lower-ranked node is the head. Every agent applies the same rule, and a
//! follower points askers to its head, so all agree. A head that drops out
//! before the cluster is ready is passed over when the others elect again.
//! A node that gives no answer is asked again after a wait that grows, drawn
//! at random (`backoff.rs`): a head busy with thousands of agents' joins is
//! not asked by all of them again at once.
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::info;

use super::backoff;
use super::cluster::{JoinAnswer, PeerRole};
use super::mesh::{Mesh, Peer};
use super::state::{Role, Shared};
use crate::fault::Fault;

/// Where `node`'s agent listens: Slurm's NodeAddr for it (which root bound
/// the mesh socket on), else whatever its name resolves to.
pub async fn address_of(spec: &crate::job::JobSpec, node: &str) -> Option<IpAddr> {
    match spec.nodes.iter().position(|n| n == node).and_then(|i| spec.addr_of(i)) {
        Some(ip) => Some(ip),
        None => resolve(node).await.ok(),
    }
}

pub async fn resolve(node: &str) -> Result<IpAddr> {
    let addrs = tokio::net::lookup_host(format!("{node}:0")).await?;
    let mut v4 = None;
    for a in addrs {
        if a.is_ipv4() {
            return Ok(a.ip());
        }
        v4.get_or_insert(a.ip());
    }
    v4.ok_or_else(|| anyhow::anyhow!("node {node} has no address"))
}

/// Returns this agent's role and, for a follower, a client of the head.
/// `passed` holds nodes not to elect (heads that dropped out before the
/// cluster was ready); a node that answers OUT joins it. Windows count from
/// `round` (this election's start), over the candidates not passed; the
/// election gives up at `give_up`.
pub async fn elect(
    shared: &Shared,
    mesh: &Mesh,
    round: Instant,
    give_up: Instant,
    passed: &mut BTreeSet<String>,
) -> Result<(Role, Option<Peer>), Fault> {
    let spec = &shared.spec;
    let head_timeout = Duration::from_secs(spec.config.head_timeout);
    // A node passed over itself (it stepped down, or its agent was
    // restarted) looks for the new head among all the others.
    let out = passed.contains(&spec.node);
    let ranks = if out { 0..spec.nodes.len() } else { 0..spec.index };
    let candidates: Vec<usize> = ranks.filter(|&i| i != spec.index && !passed.contains(&spec.nodes[i])).collect();
    let mut k = 0usize;
    // Attempts in a row that got no answer from candidate k.
    let mut unanswered = 0u32;
    loop {
        if Instant::now() > give_up {
            let timeout = spec.config.startup_timeout;
            return Err(Fault::user(format!("no head was found within the start-up timeout ({timeout} s)")));
        }
        if k >= candidates.len() {
            if !out {
                break;
            }
            // The new head has not taken office yet: ask them all again.
            k = 0;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let node = &spec.nodes[candidates[k]];
        if passed.contains(node) {
            k += 1;
            unanswered = 0;
            continue;
        }
        let window_end = round + head_timeout * (k as u32 + 1);
        let ip = address_of(spec, node).await;
        match match ip {
            Some(ip) => mesh.join(ip).await,
            None => None,
        } {
            // Rejoining (after a restart, or a step down): the cluster may
            // have failed meanwhile, and then no head will come.
            Some((_, JoinAnswer { failed: Some(failed), .. })) if out => return Err(failed),
            Some((peer, reply)) => match reply.role {
                PeerRole::Head => {
                    info!(head = %node, "following head");
                    return Ok((Role::Follower(node.clone()), Some(peer)));
                }
                PeerRole::Follower(head) => match candidates.iter().position(|&c| spec.nodes[c] == head) {
                    Some(h) if !passed.contains(&head) => (k, unanswered) = (h, 0),
                    // It follows a head that dropped out (and will elect
                    // again), or a higher-ranked node: ask again shortly.
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                },
                PeerRole::SteppedDown => {
                    info!(node = %node, "its Ray failed as head; passing over it");
                    passed.insert(node.clone());
                    k += 1;
                    unanswered = 0;
                }
                PeerRole::Undecided => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            None if Instant::now() >= window_end => {
                info!(node = %node, "no answer within its window; passing over it");
                k += 1;
                unanswered = 0;
            }
            None => {
                let wait = backoff::delay(unanswered, &mut rand::thread_rng());
                unanswered = unanswered.saturating_add(1);
                tokio::time::sleep(wait).await;
            }
        }
    }
    info!("this node is the head");
    Ok((Role::Head, None))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::agent::mesh::served_agent;
    use crate::config::PortRange;
    use crate::job::simulated_spec;

    /// Agents `which` of job `job` on `nodes`, their meshes served.
    async fn agents(
        job: u32,
        nodes: &[&str],
        which: std::ops::Range<usize>,
        head_timeout: u64,
        ports: (u16, u16),
    ) -> Vec<(Arc<Shared>, Arc<Mesh>)> {
        let mut agents = Vec::new();
        for i in which {
            let mut spec = simulated_spec(job, nodes, i);
            spec.config.head_timeout = head_timeout;
            spec.config.mesh_ports = PortRange::new(ports.0, ports.1).unwrap();
            agents.push(served_agent(spec, &"t".repeat(64)).await);
        }
        agents
    }

    /// Real agents' meshes on loopback addresses (127.0.0.2-4 as three nodes).
    /// The first node's agent never starts: the second passes over it once its
    /// window ends and becomes head, and the third follows the second.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_that_never_answers_is_passed_over_and_all_agree_on_the_next() {
        let nodes = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
        let agents = agents(4242, &nodes, 1..3, 1, (47000, 47099)).await;
        let started = Instant::now();
        let elections = agents.iter().map(|(a, mesh)| {
            let (a, mesh) = (a.clone(), mesh.clone());
            tokio::spawn(async move {
                let give_up = started + Duration::from_secs(60);
                let (role, _) = elect(&a, &mesh, started, give_up, &mut BTreeSet::new()).await.unwrap();
                a.role.send_replace(role.clone());
                role
            })
        });
        let all = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(elections));
        let roles: Vec<Role> = all.await.expect("no agreement within 20 s").into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(roles, [Role::Head, Role::Follower("127.0.0.3".into())]);
        assert!(started.elapsed() >= Duration::from_secs(1), "passed over before its window ended");
        assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    }

    /// All three agents answer, but the first one's Ray failed as head: it
    /// says OUT. The third, which has not heard of it, passes over it (OUT)
    /// or is pointed on to the new head (once the first follows it); the
    /// second becomes head without waiting for any window; and the first
    /// finds the new head among the higher-ranked nodes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_the_head_steps_down_all_agree_on_the_next_one_and_it_rejoins_as_a_follower() {
        let nodes = ["127.0.0.5", "127.0.0.6", "127.0.0.7"];
        let agents = agents(4343, &nodes, 0..3, 30, (47100, 47199)).await;
        agents[0].0.role.send_replace(Role::SteppedDown);
        let started = Instant::now();
        let elections = agents.iter().enumerate().map(|(i, (a, mesh))| {
            let (a, mesh) = (a.clone(), mesh.clone());
            tokio::spawn(async move {
                let mut passed = BTreeSet::new();
                if i < 2 {
                    passed.insert("127.0.0.5".to_string());
                }
                let give_up = started + Duration::from_secs(60);
                let (role, _) = elect(&a, &mesh, started, give_up, &mut passed).await.unwrap();
                a.role.send_replace(role.clone());
                (role, passed)
            })
        });
        let all = tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(elections));
        let results: Vec<(Role, BTreeSet<String>)> =
            all.await.expect("no agreement within 20 s").into_iter().map(|r| r.unwrap()).collect();
        let roles: Vec<&Role> = results.iter().map(|(r, _)| r).collect();
        let next = Role::Follower("127.0.0.6".into());
        assert_eq!(roles, [&next, &Role::Head, &next]);
        assert!(started.elapsed() < Duration::from_secs(10), "waited for a window: {:?}", started.elapsed());
    }
}
