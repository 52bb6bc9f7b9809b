//! The Prometheus file_sd file of one job's Ray on one node, as root and the
//! agent agree on it. Root's prolog makes the file in the site's
//! `metrics_sd_dir` (root's directory) under [`file_name`], with no target,
//! and gives it to the job's user; the agent fills it in place once its Ray
//! runs; the epilog removes it. Prometheus reads `<metrics_sd_dir>/`[`GLOB`].
//!
//! Every such file is exactly [`RECORD_SIZE`] bytes: the JSON, padded with
//! spaces (JSON allows trailing white space). The agent cannot rename in
//! root's directory, so it rewrites the file with one write at offset 0 that
//! never changes its length: Prometheus never reads an empty or short file.
use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// The glob a site's `file_sd_configs` names, in `metrics_sd_dir`.
pub const GLOB: &str = "syndeo-*.json";
/// The size of every record file.
pub const RECORD_SIZE: usize = 4096;
/// The longest node name a file is made for (Slurm's are far shorter).
const NODE_MAX: usize = 200;

/// A node's part in the job's Ray cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Head,
    Worker,
}

/// One node's Ray metrics endpoint and its labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsTarget {
    pub job_id: u32,
    pub user: String,
    pub node: String,
    pub role: Role,
    /// Ray's metrics export address on this node.
    pub target: SocketAddr,
}

/// One target group of Prometheus' file_sd format.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Group {
    targets: Vec<String>,
    labels: BTreeMap<String, String>,
}

/// The file's name for job `job_id` on `node`, `syndeo-<job>-<node>.json`;
/// refused for a node name that is not a plain host name.
pub fn file_name(job_id: u32, node: &str) -> Result<String, String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if node.is_empty() || node.len() > NODE_MAX || node.starts_with('.') || !node.chars().all(plain) {
        return Err(format!("node name {node:?} is not a plain host name; no metrics file is made for it"));
    }
    Ok(format!("syndeo-{job_id}-{node}.json"))
}

/// A name to write the file under before it is renamed into place: hidden,
/// and not matched by [`GLOB`] (it does not end in `.json`).
pub fn temp_name(final_name: &str, random: &str) -> String {
    format!(".{final_name}.{random}.tmp")
}

/// The file's bytes: `target`'s group, or none (`[]`), padded to
/// [`RECORD_SIZE`] and ending in a newline.
pub fn encode(target: Option<&MetricsTarget>) -> Result<Vec<u8>, String> {
    let groups: Vec<Group> = target.into_iter().map(group_of).collect();
    let mut bytes = serde_json::to_vec(&groups).map_err(|e| e.to_string())?;
    if bytes.len() >= RECORD_SIZE {
        return Err(format!("the metrics record is {} bytes, over {RECORD_SIZE}", bytes.len()));
    }
    bytes.resize(RECORD_SIZE - 1, b' ');
    bytes.push(b'\n');
    Ok(bytes)
}

fn group_of(t: &MetricsTarget) -> Group {
    let role = match t.role {
        Role::Head => "head",
        Role::Worker => "worker",
    };
    let labels = [("slurm_job_id", t.job_id.to_string()), ("user", t.user.clone()), ("node", t.node.clone())];
    let mut labels: BTreeMap<String, String> = labels.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    labels.insert("role".into(), role.into());
    Group { targets: vec![t.target.to_string()], labels }
}

/// What a file says: its target, or None for no target.
pub fn decode(bytes: &[u8]) -> Result<Option<MetricsTarget>, String> {
    let groups: Vec<Group> = serde_json::from_slice(bytes).map_err(|e| format!("not a syndeo metrics record: {e}"))?;
    let Some(g) = groups.first() else { return Ok(None) };
    if groups.len() != 1 || g.targets.len() != 1 || g.labels.len() != 4 {
        return Err("a syndeo metrics record has one group with one target and four labels".into());
    }
    let label = |k: &str| g.labels.get(k).cloned().ok_or_else(|| format!("no label {k}"));
    let role = match label("role")?.as_str() {
        "head" => Role::Head,
        "worker" => Role::Worker,
        r => return Err(format!("role {r:?} is neither head nor worker")),
    };
    Ok(Some(MetricsTarget {
        job_id: label("slurm_job_id")?.parse().map_err(|e| format!("slurm_job_id: {e}"))?,
        user: label("user")?,
        node: label("node")?,
        role,
        target: g.targets[0].parse().map_err(|e| format!("target {}: {e}", g.targets[0]))?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> MetricsTarget {
        MetricsTarget {
            job_id: 42,
            user: "alice".into(),
            node: "node-1".into(),
            role: Role::Head,
            target: "10.0.0.1:20003".parse().unwrap(),
        }
    }

    #[test]
    fn a_record_is_prometheus_file_sd_json_padded_to_one_size_and_reads_back() {
        let bytes = encode(Some(&target())).unwrap();
        assert_eq!(bytes.len(), RECORD_SIZE);
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v[0]["targets"][0], "10.0.0.1:20003");
        assert_eq!(v[0]["labels"]["slurm_job_id"], "42", "Prometheus' labels are strings");
        assert_eq!((v[0]["labels"]["role"].as_str(), v[0]["labels"]["node"].as_str()), (Some("head"), Some("node-1")));
        assert_eq!(decode(&bytes).unwrap(), Some(target()));
        let empty = encode(None).unwrap();
        assert_eq!((empty.len(), &empty[..2]), (RECORD_SIZE, &b"[]"[..]));
        assert_eq!(decode(&empty).unwrap(), None);
    }

    #[test]
    fn an_ipv6_target_is_bracketed_and_a_user_name_is_escaped_not_trusted() {
        let mut t = target();
        t.target = "[fd00::1]:20003".parse().unwrap();
        t.user = "a\"b\n".into();
        t.role = Role::Worker;
        let bytes = encode(Some(&t)).unwrap();
        assert!(String::from_utf8_lossy(&bytes).contains("\"[fd00::1]:20003\""));
        assert_eq!(decode(&bytes).unwrap(), Some(t.clone()));
        t.user = "x".repeat(RECORD_SIZE);
        assert!(encode(Some(&t)).is_err(), "a record that does not fit is refused, never cut");
    }

    #[test]
    fn the_file_name_carries_job_and_node_matches_the_glob_and_the_temp_name_does_not() {
        let name = file_name(42, "node-1").unwrap();
        assert_eq!(name, "syndeo-42-node-1.json");
        let (prefix, suffix) = GLOB.split_once('*').unwrap();
        let matches = |n: &str| n.starts_with(prefix) && n.ends_with(suffix);
        assert!(matches(&name));
        let temp = temp_name(&name, "0123abcd");
        assert!(!matches(&temp) && temp.starts_with('.'), "{temp}");
        for bad in ["", "../x", "a/b", ".hidden", "n 1", "n\n1", &"n".repeat(201)] {
            assert!(file_name(1, bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn what_is_not_a_syndeo_record_is_refused() {
        assert!(decode(b"").is_err());
        assert!(decode(b"[{\"targets\":[\"a:1\",\"b:2\"],\"labels\":{}}]").is_err());
        let forged =
            br#"[{"targets":["10.0.0.1:1"],"labels":{"slurm_job_id":"1","user":"u","node":"n","role":"boss"}}]"#;
        assert!(decode(forged).unwrap_err().contains("boss"));
    }
}
