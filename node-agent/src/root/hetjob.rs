//! A heterogeneous job's layout, for its one Ray cluster. Slurm runs a
//! heterogeneous job as one job per component (ids from the leader's up, each
//! its own prolog, extern step and epilog), and a component's prolog knows
//! only its own job id and node list, and the leader's id
//! (`SLURM_HET_JOB_ID`, src/plugins/prep/script/prep_script_slurmd.c; the same
//! in 22.05, 24.11 and 26.05). The other components' node lists come from
//! the controller: `squeue -j LEADER -o "%A %i %S %N"` (every component is
//! placed by the time any prolog runs). Those fields are numbers, times and
//! host lists only, nothing a user can write: a job name with spaces cannot
//! fake a component.
//!
//! The cluster's nodes are the components' nodes in component order: its
//! head is the first node of component 0, where the batch script runs. The
//! job's secret derives from the leader's start time on every node: the
//! backfill scheduler starts the components one after another, each with
//! its own clock reading, so their own start times may differ by a second.
use std::time::Duration;

use crate::hostlist;

/// One component as the controller lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct Component {
    pub job_id: u32,
    pub offset: u32,
    /// When Slurm started it (seconds since the epoch; 0 if it did not say).
    pub start_time: u64,
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
    /// Component 0's start time, which every component's secret takes.
    pub start_time: u64,
}

/// Why a layout cannot be had: the user's (`User`) or the node's.
#[derive(Debug, PartialEq)]
pub enum LayoutError {
    User(String),
    Node(String),
}

/// Each try's limit, and the tries: a controller busy with every node's
/// prolog asking at once gets a second and third chance, all well within the
/// plugin's 60 s for the prolog.
const SQUEUE_LIMIT: Duration = Duration::from_secs(12);
const SQUEUE_TRIES: u32 = 3;

/// Asks the controller for job `leader`'s components (start times as
/// seconds since the epoch: `SLURM_TIME_FORMAT=%s`).
pub fn query(leader: u32) -> Result<String, LayoutError> {
    let id = leader.to_string();
    let args = ["--noheader", "--states=all", "--jobs", &id, "--format=%A %i %S %N"];
    let mut last = None;
    for attempt in 0..SQUEUE_TRIES {
        if attempt > 0 {
            std::thread::sleep(Duration::from_secs(2 * attempt as u64));
        }
        match super::slurm_client::run_with("squeue", &args, &[("SLURM_TIME_FORMAT", "%s")], SQUEUE_LIMIT) {
            Ok(text) => return Ok(text),
            Err(e) => last = Some(e),
        }
    }
    let e = last.map(|e| e.to_string()).unwrap_or_default();
    Err(LayoutError::Node(format!("squeue about heterogeneous job {leader} {e} ({SQUEUE_TRIES} tries)")))
}

/// Parses `squeue --format="%A %i %S %N"` (job id, "LEADER+OFFSET", start
/// time, node list). Lines of other jobs (no "LEADER+" of this leader) are
/// not ours; a node list Slurm has not filled (none, "(null)", "N/A") is empty.
pub fn parse(text: &str, leader: u32) -> Result<Vec<Component>, LayoutError> {
    let bad = |line: &str| LayoutError::Node(format!("squeue's line about job {leader} is not understood: {line:?}"));
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some((lead, offset)) = f.get(1).and_then(|het| het.split_once('+')) else { continue };
        if lead.parse::<u32>().ok() != Some(leader) {
            continue;
        }
        if !(3..=4).contains(&f.len()) {
            return Err(bad(line));
        }
        let job_id: u32 = f[0].parse().map_err(|_| bad(line))?;
        let offset: u32 = offset.parse().map_err(|_| bad(line))?;
        let start_time = f[2].parse().unwrap_or(0);
        let nodes = match f.get(3) {
            Some(list) if !["(null)", "N/A"].contains(list) => {
                hostlist::expand(list).map_err(|e| LayoutError::Node(format!("{e:#}")))?
            }
            _ => vec![],
        };
        out.push(Component { job_id, offset, start_time, nodes });
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
    // Every component, 0 first and the leader: else nodes would disagree.
    let whole = components.iter().enumerate().all(|(i, c)| c.offset == i as u32)
        && components.first().is_some_and(|c| c.job_id == leader);
    if !whole {
        let seen: Vec<String> = components.iter().map(|c| format!("{}+{}", c.job_id, c.offset)).collect();
        return Err(LayoutError::Node(format!("the controller lists job {leader}'s components as {seen:?}")));
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
    Ok(Layout { cluster_id: leader, offset: me.offset, nodes, start_time: components[0].start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "6 5+1 1764130001 node[2-3]\n5 5+0 1764130000 node1\n";

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
        assert_eq!((l.cluster_id, l.offset, l.start_time), (5, 1, 1764130000), "component 0's start time");
        assert_eq!(l.nodes, ["node1", "node2", "node3"]);
        assert_eq!(layout(&c, 5, 5).unwrap().offset, 0);
    }

    #[test]
    fn a_node_in_two_components_is_the_users_to_fix_and_named() {
        let c = parse("7 7+0 1 n[1-2]\n8 7+1 1 n2\n", 7).unwrap();
        match layout(&c, 7, 8) {
            Err(LayoutError::User(m)) => assert!(m.contains("node n2 is in two components"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_component_missing_unplaced_or_of_another_job_is_a_node_fault_not_a_guess() {
        let c = parse(TWO, 5).unwrap();
        assert!(matches!(layout(&c, 5, 9), Err(LayoutError::Node(_))));
        for unplaced in ["5 5+0 1 node1\n6 5+1 N/A\n", "5 5+0 1 node1\n6 5+1 N/A (null)\n"] {
            let pending = parse(unplaced, 5).unwrap();
            assert!(matches!(layout(&pending, 5, 5), Err(LayoutError::Node(_))), "{unplaced}");
        }
        let gap = parse("5 5+0 1 n1\n7 5+2 1 n3\n", 5).unwrap();
        assert!(matches!(layout(&gap, 5, 7), Err(LayoutError::Node(m)) if m.contains("components as")));
        assert_eq!(parse("9 8+0 1 n1\n12 12 1 n2\n", 5).unwrap(), vec![], "other jobs' lines are not ours");
        assert!(matches!(parse("5 5+x 1 n1\n", 5), Err(LayoutError::Node(_))));
        assert!(matches!(parse("5 5+0 1 n1 extra\n", 5), Err(LayoutError::Node(_))));
    }
}
