//! The device files of the GPUs Slurm allocated to a job on this node, from
//! Slurm's own GRES configuration (`gres.conf` beside the running
//! `slurm.conf`): the prolog is told the GPUs' indices (`SLURM_JOB_GPUS`),
//! and index N is the N-th GPU device file this node's `Name=gpu` lines list
//! (`File=` with Slurm's bracket ranges), in the file's order, as Slurm
//! numbers them. Never `/dev/nvidia<N>`: a node's device numbering need not
//! follow Slurm's indices. A node whose GPUs Slurm detects itself
//! (`AutoDetect=nvml`, no `File=`) falls back to `/dev/nvidia<N>`.
//!
//! The same lines give the GPUs' type (`Type=`), for the node's Ray labels.
use std::path::PathBuf;

use crate::hostlist;

/// The device files of `indices` on `node`, from the gres.conf text.
pub fn gpu_devices(gres_conf: &str, node: &str, indices: &[String]) -> Vec<PathBuf> {
    let files = node_gpu_files(gres_conf, node);
    indices
        .iter()
        .filter_map(|i| i.parse::<usize>().ok())
        .map(|i| files.get(i).cloned().unwrap_or_else(|| PathBuf::from(format!("/dev/nvidia{i}"))))
        .collect()
}

/// This node's GPU device files, in Slurm's index order.
pub fn node_gpu_files(gres_conf: &str, node: &str) -> Vec<PathBuf> {
    node_gpu_lines(gres_conf, node).into_iter().flat_map(|l| l.files).collect()
}

/// The type of the GPUs at `indices` on `node`, when gres.conf gives them
/// all the same one: by index (one per `File=` entry, or `Count=` of a line
/// without files), else the one type every GPU line of the node has.
pub fn gpu_type(gres_conf: &str, node: &str, indices: &[String]) -> Option<String> {
    if indices.is_empty() {
        return None;
    }
    let lines = node_gpu_lines(gres_conf, node);
    let per_index: Vec<Option<&str>> =
        lines.iter().flat_map(|l| std::iter::repeat_n(l.kind.as_deref(), l.files.len().max(l.count))).collect();
    let by_index: Option<Vec<Option<&str>>> =
        indices.iter().map(|i| i.parse::<usize>().ok().and_then(|i| per_index.get(i).copied())).collect();
    let kinds = match by_index {
        Some(kinds) => kinds,
        None => lines.iter().map(|l| l.kind.as_deref()).collect(),
    };
    let first = (*kinds.first()?)?;
    kinds.iter().all(|k| *k == Some(first)).then(|| first.to_string())
}

/// One `Name=gpu` line of gres.conf that applies to a node.
struct GpuLine {
    files: Vec<PathBuf>,
    kind: Option<String>,
    count: usize,
}

fn node_gpu_lines(gres_conf: &str, node: &str) -> Vec<GpuLine> {
    let mut out = Vec::new();
    for line in gres_conf.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let fields: Vec<(&str, &str)> = line.split_whitespace().filter_map(|f| f.split_once('=')).collect();
        let get = |k: &str| fields.iter().find(|(key, _)| key.eq_ignore_ascii_case(k)).map(|(_, v)| *v);
        if get("Name").is_none_or(|n| !n.eq_ignore_ascii_case("gpu")) {
            continue;
        }
        if let Some(nodes) = get("NodeName") {
            if !hostlist::expand(nodes).is_ok_and(|ns| ns.iter().any(|n| n == node)) {
                continue;
            }
        }
        let files = get("File").or_else(|| get("Files"));
        out.push(GpuLine {
            files: files
                .map(|f| hostlist::expand(f).unwrap_or_default().into_iter().map(PathBuf::from).collect())
                .unwrap_or_default(),
            kind: get("Type").map(str::to_string),
            count: get("Count").and_then(|c| c.parse().ok()).unwrap_or(0),
        });
    }
    out
}

/// gres.conf beside the running slurm.conf (`SLURM_CONF` in the prolog's environment).
pub fn gres_conf_path(slurm_conf: Option<&str>) -> PathBuf {
    crate::slurm_conf::beside(slurm_conf, "gres.conf")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = "\
# stand-in GPUs whose minor numbers differ from their indices
AutoDetect=off
NodeName=node[1-2] Name=gpu Type=a100 File=/dev/stand/gpu[7,3]
NodeName=node3 Name=gpu File=/dev/nvidia[0-1]
Name=mps Count=100
NodeName=node[1-2] Name=gpu Type=t4 File=/dev/stand/t4_0
";

    #[test]
    fn indices_map_to_this_nodes_files_in_slurms_order_not_to_dev_nvidia_n() {
        assert_eq!(
            node_gpu_files(CONF, "node1"),
            [PathBuf::from("/dev/stand/gpu7"), "/dev/stand/gpu3".into(), "/dev/stand/t4_0".into()]
        );
        assert_eq!(
            gpu_devices(CONF, "node2", &["1".into(), "2".into()]),
            [PathBuf::from("/dev/stand/gpu3"), "/dev/stand/t4_0".into()]
        );
        assert_eq!(gpu_devices(CONF, "node3", &["1".into()]), [PathBuf::from("/dev/nvidia1")]);
    }

    #[test]
    fn without_file_lines_slurms_index_is_the_device_number() {
        assert_eq!(
            gpu_devices("AutoDetect=nvml\nName=gpu Count=2\n", "n1", &["1".into()]),
            [PathBuf::from("/dev/nvidia1")]
        );
    }

    #[test]
    fn the_gpus_type_comes_from_their_lines_and_only_when_they_share_one() {
        assert_eq!(gpu_type(CONF, "node1", &["0".into(), "1".into()]).as_deref(), Some("a100"));
        assert_eq!(gpu_type(CONF, "node1", &["2".into()]).as_deref(), Some("t4"));
        assert_eq!(gpu_type(CONF, "node1", &["1".into(), "2".into()]), None, "mixed types");
        assert_eq!(gpu_type(CONF, "node3", &["0".into()]), None, "no Type=");
        assert_eq!(gpu_type(CONF, "node1", &[]), None, "no GPUs");
        let counted = "Name=gpu Type=h100 Count=4\n";
        assert_eq!(gpu_type(counted, "n1", &["3".into()]).as_deref(), Some("h100"));
        assert_eq!(gpu_type("AutoDetect=nvml\nName=gpu Type=h100\n", "n1", &["5".into()]).as_deref(), Some("h100"));
    }

    #[test]
    fn gres_conf_lies_beside_slurm_conf() {
        assert_eq!(gres_conf_path(Some("/run/slurm/conf/slurm.conf")), PathBuf::from("/run/slurm/conf/gres.conf"));
        assert_eq!(gres_conf_path(None), PathBuf::from("/etc/slurm/gres.conf"));
    }
}
