//! A heterogeneous job's layout, for its one Ray cluster. Slurm runs a
//! heterogeneous job as one job per component (ids from the leader's up, each
//! its own prolog, extern step and epilog), and a component's prolog knows
//! only its own job id and node list, and the leader's id
//! (`SLURM_HET_JOB_ID`, src/plugins/prep/script/prep_script_slurmd.c; the same
//! in 22.05, 24.11 and 26.05). The other components' node lists come from
//! the controller: `squeue -j LEADER -o "%A %i %N"` (every component starts
//! at once, so all are placed by the time any prolog runs). Those fields are
//! numbers and host lists only, nothing a user can write: a job name with
//! spaces cannot fake a component.
//!
//! The cluster's nodes are the components' nodes in component order: its
//! head is the first node of component 0, where the batch script runs.
use std::time::Duration;

use crate::hostlist;

/// One component as the controller lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub job_id: u32,
    pub offset: u32,
    pub nodes: Vec<String>,
}

/// Where this component's nodes sit in the job's one cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The leader's id: what the whole job's agents agree on.
    pub cluster_id: u32,
    /// This component's index (`srun --het-group`).
    pub offset: u32,
    /// Every component's nodes, component 0 first.
    pub nodes: Vec<String>,
}

/// Why a layout cannot be had: the user's (`User`) or the node's.
#[derive(Debug, PartialEq)]
pub enum LayoutError {
    User(String),
    Node(String),
}

const SQUEUE_LIMIT: Duration = Duration::from_secs(15);

/// Asks the controller for job `leader`'s components.
pub fn query(leader: u32) -> Result<String, LayoutError> {
    let id = leader.to_string();
    super::slurm_client::run(
        "squeue",
        &["--noheader", "--states=all", "--jobs", &id, "--format=%A %i %N"],
        SQUEUE_LIMIT,
    )
    .map_err(|e| LayoutError::Node(format!("squeue about heterogeneous job {leader} {e}")))
}

/// Parses `squeue --format="%A %i %N"` (job id, "LEADER+OFFSET", node list).
pub fn parse(text: &str, leader: u32) -> Result<Vec<Component>, LayoutError> {
    let bad = |line: &str| LayoutError::Node(format!("squeue's line about job {leader} is not understood: {line:?}"));
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut f = line.split_whitespace();
        let (Some(id), Some(het), nodes, None) = (f.next(), f.next(), f.next(), f.next()) else {
            return Err(bad(line));
        };
        let job_id: u32 = id.parse().map_err(|_| bad(line))?;
        let Some((lead, offset)) = het.split_once('+') else { return Err(bad(line)) };
        if lead.parse::<u32>().ok() != Some(leader) {
            continue;
        }
        let offset: u32 = offset.parse().map_err(|_| bad(line))?;
        let nodes = match nodes {
            Some(list) => hostlist::expand(list).map_err(|e| LayoutError::Node(format!("{e:#}")))?,
            None => vec![],
        };
        out.push(Component { job_id, offset, nodes });
    }
    out.sort_by_key(|c| c.offset);
    Ok(out)
}

/// The layout for component job `own` from the job's components.
pub fn layout(components: &[Component], leader: u32, own: u32) -> Result<Layout, LayoutError> {
    let me = components.iter().find(|c| c.job_id == own).ok_or_else(|| {
        LayoutError::Node(format!(
            "the controller does not list job {own} among heterogeneous job {leader}'s components"
        ))
    })?;
    if let Some(c) = components.iter().find(|c| c.nodes.is_empty()) {
        return Err(LayoutError::Node(format!("component {} of job {leader} has no nodes yet", c.offset)));
    }
    let mut nodes: Vec<String> = Vec::new();
    for c in components {
        for n in &c.nodes {
            if nodes.contains(n) {
                return Err(LayoutError::User(format!(
                    "node {n} is in two components of heterogeneous job {leader}; syndeo runs one Ray node per \
                     Slurm node, so give each component nodes of its own (for example --exclusive, or -w/-x or \
                     separate partitions per component)"
                )));
            }
            nodes.push(n.clone());
        }
    }
    Ok(Layout { cluster_id: leader, offset: me.offset, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "6 5+1 node[2-3]\n5 5+0 node1\n";

    #[test]
    fn components_come_in_offset_order_with_their_expanded_nodes() {
        let c = parse(TWO, 5).unwrap();
        assert_eq!(c.iter().map(|c| (c.job_id, c.offset)).collect::<Vec<_>>(), [(5, 0), (6, 1)]);
        assert_eq!(c[1].nodes, ["node2", "node3"]);
    }

    #[test]
    fn the_cluster_is_component_zero_first_and_each_component_knows_its_offset() {
        let c = parse(TWO, 5).unwrap();
        let l = layout(&c, 5, 6).unwrap();
        assert_eq!((l.cluster_id, l.offset), (5, 1));
        assert_eq!(l.nodes, ["node1", "node2", "node3"]);
        assert_eq!(layout(&c, 5, 5).unwrap().offset, 0);
    }

    #[test]
    fn a_node_in_two_components_is_the_users_to_fix_and_named() {
        let c = parse("7 7+0 n[1-2]\n8 7+1 n2\n", 7).unwrap();
        match layout(&c, 7, 8) {
            Err(LayoutError::User(m)) => assert!(m.contains("node n2 is in two components"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_component_missing_unplaced_or_of_another_job_is_a_node_fault_not_a_guess() {
        let c = parse(TWO, 5).unwrap();
        assert!(matches!(layout(&c, 5, 9), Err(LayoutError::Node(_))));
        let pending = parse("5 5+0 node1\n6 5+1\n", 5).unwrap();
        assert!(matches!(layout(&pending, 5, 5), Err(LayoutError::Node(_))));
        assert_eq!(parse("9 8+0 n1\n", 5).unwrap(), vec![], "another leader's line is not ours");
        assert!(matches!(parse("5 5+x n1\n", 5), Err(LayoutError::Node(_))));
        assert!(matches!(parse("5 5+0 n1 extra\n", 5), Err(LayoutError::Node(_))));
    }
}
