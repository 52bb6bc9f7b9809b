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
