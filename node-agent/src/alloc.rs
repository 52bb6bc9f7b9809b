//! What the job was given on each node: from the prolog's environment,
//! `SLURM_JOB_CPUS_PER_NODE` ("2(x3),1": counts with repeat factors, in node
//! list order) and GPU ids (`SLURM_JOB_GPUS` / `CUDA_VISIBLE_DEVICES`); from
//! `scontrol show job -d` (the prolog of Slurm 22.05 is not told), the memory
//! per node; and from these, Ray's memory arguments.
use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
#[error("cannot read SLURM_JOB_CPUS_PER_NODE=\"{0}\"")]
pub struct CpusError(pub String);

/// Expands "2(x3),1" to [2, 2, 2, 1].
pub fn cpus_per_node(spec: &str) -> Result<Vec<u32>, CpusError> {
    let err = || CpusError(spec.into());
    let mut out = Vec::new();
    for part in spec.split(',').filter(|p| !p.is_empty()) {
        let (count, repeat) = match part.split_once("(x") {
            Some((c, r)) => (c, r.strip_suffix(')').ok_or_else(err)?),
            None => (part, "1"),
        };
        let count: u32 = count.trim().parse().map_err(|_| err())?;
        let repeat: usize = repeat.trim().parse().map_err(|_| err())?;
        if repeat > 65536 {
            return Err(err());
        }
        out.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(out)
}

/// Memory (MiB) per node from `scontrol show job -d` detail lines such as
/// `     Nodes=node[1-3] CPU_IDs=0 Mem=1500 GRES=`. Nodes with Mem=0 (memory
/// not tracked by the site's select plugin) are left out.
pub fn mem_per_node(detail: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in detail.lines() {
        let mut nodes = None;
        let mut mem = None;
        for field in line.split_whitespace() {
            if let Some(v) = field.strip_prefix("Nodes=") {
                nodes = Some(v);
            } else if let Some(v) = field.strip_prefix("Mem=") {
                mem = v.parse::<u64>().ok();
            }
        }
        if let (Some(nodes), Some(mem)) = (nodes, mem) {
            if mem > 0 {
                for n in crate::hostlist::expand(nodes).unwrap_or_default() {
                    out.insert(n, mem);
                }
            }
        }
    }
    out
}

/// The job's stderr file (`StdErr=`) in `scontrol show job` output, where
/// the agents add a line about what happened to the cluster while it ran.
pub fn job_stderr(detail: &str) -> Option<String> {
    detail.split_whitespace().find_map(|f| f.strip_prefix("StdErr=")).filter(|p| p.starts_with('/')).map(str::to_string)
}

/// Ray's memory arguments for a node: with the allocation known, the object
/// store takes at most a third of it (and at most the site's
/// `object_store_mb`), and `--memory` the rest; unknown, the site's object
/// store size alone.
pub fn ray_memory_args(object_store_mb: u64, allocated_mb: Option<u64>) -> Vec<String> {
    const MIB: u64 = 1024 * 1024;
    match allocated_mb {
        Some(mem) if mem / 3 >= 80 => {
            let store = object_store_mb.min(mem / 3);
            vec![
                "--object-store-memory".into(),
                (store * MIB).to_string(),
                "--memory".into(),
                ((mem - store) * MIB).to_string(),
            ]
        }
        _ => vec!["--object-store-memory".into(), (object_store_mb * MIB).to_string()],
    }
}

/// GPU ids allocated on this node: "0,1" -> ["0", "1"]; empty or "NoDevFiles" -> none.
pub fn gpu_ids(spec: Option<&str>) -> Vec<String> {
    match spec {
        None => vec![],
        Some(s) if s.trim().is_empty() || s == "NoDevFiles" => vec![],
        Some(s) => s.split(',').map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_factors_expand_in_order() {
        assert_eq!(cpus_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
        assert_eq!(cpus_per_node("4").unwrap(), vec![4]);
        assert_eq!(cpus_per_node("1,8(x2)").unwrap(), vec![1, 8, 8]);
    }

    #[test]
    fn malformed_cpu_specs_are_errors() {
        assert!(cpus_per_node("two").is_err());
        assert!(cpus_per_node("2(x3").is_err());
        assert!(cpus_per_node("2(x99999999)").is_err());
    }

    #[test]
    fn memory_per_node_comes_from_every_detail_line() {
        let detail = "JobId=7 JobName=x\n   NumNodes=3-3 NumCPUs=3\n     Nodes=node[1-2] CPU_IDs=0 Mem=1500 GRES=\n     Nodes=node3 CPU_IDs=0-1 Mem=3000 GRES=\n";
        let m = mem_per_node(detail);
        assert_eq!(m.len(), 3);
        assert_eq!((m["node1"], m["node2"], m["node3"]), (1500, 1500, 3000));
    }

    #[test]
    fn the_jobs_stderr_path_is_found_and_must_be_absolute() {
        let detail =
            "   WorkDir=/home/u/w\n   StdErr=/home/u/w/job.err\n   StdIn=/dev/null\n   StdOut=/home/u/w/job.out\n";
        assert_eq!(job_stderr(detail).as_deref(), Some("/home/u/w/job.err"));
        assert_eq!(job_stderr("StdErr=(null)"), None);
        assert_eq!(job_stderr("JobId=3"), None);
    }

    #[test]
    fn untracked_memory_gives_no_figure() {
        assert!(mem_per_node("     Nodes=node[1-3] CPU_IDs=0 Mem=0 GRES=\n").is_empty());
        assert!(mem_per_node("garbage").is_empty());
    }

    #[test]
    fn ray_memory_splits_the_allocation_and_caps_the_object_store() {
        let mib = |n: u64| (n * 1024 * 1024).to_string();
        assert_eq!(ray_memory_args(512, Some(1500)), ["--object-store-memory", &mib(500), "--memory", &mib(1000)]);
        assert_eq!(ray_memory_args(512, Some(8192)), ["--object-store-memory", &mib(512), "--memory", &mib(7680)]);
        assert_eq!(ray_memory_args(512, None), ["--object-store-memory", &mib(512)]);
        assert_eq!(ray_memory_args(512, Some(100)), ["--object-store-memory", &mib(512)], "too small to split");
    }

    #[test]
    fn gpu_ids_are_split_and_empty_means_none() {
        assert_eq!(gpu_ids(Some("0,3")), vec!["0", "3"]);
        assert!(gpu_ids(Some("")).is_empty());
        assert!(gpu_ids(Some("NoDevFiles")).is_empty());
        assert!(gpu_ids(None).is_empty());
    }
}
