//! Head election: the head is the first node, in the job's node-list order,
//! whose agent answers. Each agent asks the nodes ranked before it in turn;
//! a node that has not answered by its window's end (`head_timeout` per rank
//! from the agent's start) is passed over. An agent that passes over every
//! lower-ranked node is the head. Every agent applies the same rule, and a
//! follower points askers to its head, so all agree.
use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use tonic::transport::Channel;
use tracing::info;

use super::mesh::{self, pb::join_reply::Role as PbRole, pb::mesh_client::MeshClient};
use super::state::{Role, Shared};

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
pub async fn elect(shared: &Shared, started: Instant) -> Result<(Role, Option<MeshClient<Channel>>)> {
    let spec = &shared.spec;
    let head_timeout = Duration::from_secs(spec.config.head_timeout);
    let give_up = started + Duration::from_secs(spec.config.startup_timeout);
    let mut candidate = 0usize;
    while candidate < spec.index {
        if Instant::now() > give_up {
            bail!("no head was found within the start-up timeout ({} s)", spec.config.startup_timeout);
        }
        let node = &spec.nodes[candidate];
        let window_end = started + head_timeout * (candidate as u32 + 1);
        let ip = resolve(node).await.ok();
        match match ip {
            Some(ip) => mesh::join(shared, ip).await,
            None => None,
        } {
            Some((client, reply)) => match reply.role() {
                PbRole::Head => {
                    info!(head = %node, "following head");
                    return Ok((Role::Follower(node.clone()), Some(client)));
                }
                PbRole::Follower => match spec.nodes.iter().position(|n| *n == reply.head_node) {
                    Some(h) if h < spec.index => candidate = h,
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                },
                PbRole::Undecided => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            None if Instant::now() >= window_end => {
                info!(node = %node, "no answer within its window; passing over it");
                candidate += 1;
            }
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    info!("this node is the head");
    Ok((Role::Head, None))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::job::spec_for_tests;

    /// Real agents' meshes on loopback addresses (127.0.0.2-4 as three nodes).
    /// The first node's agent never starts: the second passes over it once its
    /// window ends and becomes head, and the third follows the second.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_head_that_never_answers_is_passed_over_and_all_agree_on_the_next() {
        let nodes = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
        let agents: Vec<Arc<Shared>> = (1..3)
            .map(|i| {
                let mut spec = spec_for_tests(4242, &nodes, i);
                spec.config.head_timeout = 1;
                spec.config.mesh_ports = "47000-47099".into();
                Arc::new(Shared::new(spec, "t".repeat(64)))
            })
            .collect();
        for a in &agents {
            let ip: IpAddr = a.spec.node.parse().unwrap();
            let (listener, _) = mesh::bind(ip, &a.spec.mesh_ports()).await.unwrap();
            tokio::spawn(mesh::serve(a.clone(), listener));
        }
        let started = Instant::now();
        let elections = agents.iter().map(|a| {
            let a = a.clone();
            tokio::spawn(async move {
                let (role, _) = elect(&a, started).await.unwrap();
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
}
