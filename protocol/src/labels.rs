//! Slurm's facts about one node of a job, as Ray node labels: the one type
//! the root side fills (prolog) and the agent passes to `ray start --labels`,
//! with its one encoder ([`SlurmLabels::to_arg`]) and decoder
//! ([`parse_arg`]). The label names are a user-facing contract, documented
//! in the README ("Ray node labels").
//!
//! Ray checks labels as Kubernetes does (`ray/_private/label_utils.py`): a
//! key is `[prefix/]name`, the prefix a DNS subdomain, the name and every
//! value at most 63 characters of `[A-Za-z0-9_.-]` that begin and end with a
//! letter or digit; `ray.io/` is Ray's own. A fact that does not fit (a
//! feature named `a+b`) gets no label: a mangled value would mislead a
//! selector.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The prefix of every label syndeo sets.
pub const PREFIX: &str = "slurm/";
/// The Slurm node name (`SLURMD_NODENAME`).
pub const NODE: &str = "slurm/node";
/// The partition the job runs in.
pub const PARTITION: &str = "slurm/partition";
/// The heterogeneous job component the node belongs to (`srun
/// --het-group`'s index); 0 in a plain job.
pub const HET_GROUP: &str = "slurm/het-group";
/// GPUs Slurm allocated to the job on the node (always set, "0" without).
pub const GPU_COUNT: &str = "slurm/gpu-count";
/// Their GRES type (gres.conf `Type=`), when all of them have the same one.
pub const GPU_TYPE: &str = "slurm/gpu-type";
/// One label per feature of the node, `slurm/feature.<name>=true`: a
/// selector `{"slurm/feature.bigmem": "true"}` picks the nodes that have it.
pub const FEATURE_PREFIX: &str = "slurm/feature.";
/// The value of every feature label.
pub const FEATURE_VALUE: &str = "true";

/// What Slurm says of one node of the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmLabels {
    pub node: String,
    /// None when Slurm did not say (or named several).
    #[serde(default)]
    pub partition: Option<String>,
    #[serde(default)]
    pub het_group: u32,
    /// The node's features, as Slurm lists them.
    #[serde(default)]
    pub features: Vec<String>,
    #[serde(default)]
    pub gpu_count: u32,
    #[serde(default)]
    pub gpu_type: Option<String>,
}

impl SlurmLabels {
    /// The labels, in a fixed order, and the facts left out because Ray
    /// would refuse them (`key=value` each, for a log line).
    pub fn pairs(&self) -> (Vec<(String, String)>, Vec<String>) {
        let mut all: Vec<(String, String)> = vec![(NODE.into(), self.node.clone())];
        all.extend(self.partition.iter().map(|p| (PARTITION.to_string(), p.clone())));
        all.push((HET_GROUP.into(), self.het_group.to_string()));
        all.push((GPU_COUNT.into(), self.gpu_count.to_string()));
        all.extend(self.gpu_type.iter().map(|t| (GPU_TYPE.to_string(), t.clone())));
        for f in &self.features {
            all.push((format!("{FEATURE_PREFIX}{f}"), FEATURE_VALUE.into()));
        }
        let (mut ok, mut left_out) = (Vec::new(), Vec::new());
        for (k, v) in all {
            if valid_key(&k) && valid_value(&v) && !ok.iter().any(|(seen, _)| *seen == k) {
                ok.push((k, v));
            } else {
                left_out.push(format!("{k}={v}"));
            }
        }
        (ok, left_out)
    }

    /// The value of `ray start --labels` (Ray 2.49 and later): `k=v,k=v`.
    pub fn to_arg(&self) -> String {
        self.pairs().0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }
}

/// A `--labels` value back into its labels, as Ray reads it
/// (`parse_node_labels_string`): pairs split at commas, key and value at `=`.
pub fn parse_arg(arg: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in arg.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').filter(|(_, v)| !v.contains('=')).ok_or_else(|| format!("`{pair}`"))?;
        if !valid_key(k.trim()) || !valid_value(v.trim()) {
            return Err(format!("`{pair}` is not a valid Ray label"));
        }
        out.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(out)
}

/// A Ray label name or value: 1 to 63 of `[A-Za-z0-9_.-]`, beginning and
/// ending with a letter or digit.
fn valid_name(s: &str) -> bool {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || b"_.-".contains(c);
    (1..=63).contains(&b.len())
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(inner)
}

/// A key Ray accepts from a user: `[prefix/]name`, the prefix dot-separated
/// names (at most 253 bytes), never Ray's own `ray.io/`.
pub fn valid_key(k: &str) -> bool {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok = prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(valid_name) && p != "ray.io");
    prefix_ok && valid_name(name)
}

/// A value Ray accepts (empty is allowed by Ray; syndeo never sets one).
pub fn valid_value(v: &str) -> bool {
    valid_name(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> SlurmLabels {
        SlurmLabels {
            node: "node3".into(),
            partition: Some("debug".into()),
            het_group: 0,
            features: vec!["bigmem".into(), "cpu_fast".into()],
            gpu_count: 2,
            gpu_type: Some("a100".into()),
        }
    }

    #[test]
    fn every_fact_becomes_a_label_and_the_arg_round_trips() {
        let arg = plain().to_arg();
        assert_eq!(
            arg,
            "slurm/node=node3,slurm/partition=debug,slurm/het-group=0,slurm/gpu-count=2,slurm/gpu-type=a100,\
             slurm/feature.bigmem=true,slurm/feature.cpu_fast=true"
        );
        let back = parse_arg(&arg).unwrap();
        assert_eq!(back.len(), 7);
        assert_eq!((back[NODE].as_str(), back[HET_GROUP].as_str(), back[GPU_COUNT].as_str()), ("node3", "0", "2"));
        assert_eq!(back["slurm/feature.bigmem"], "true");
    }

    #[test]
    fn unknown_facts_give_no_label_but_the_gpu_count_is_always_there() {
        let l = SlurmLabels { node: "n1".into(), ..Default::default() };
        assert_eq!(l.to_arg(), "slurm/node=n1,slurm/het-group=0,slurm/gpu-count=0");
    }

    #[test]
    fn facts_ray_would_refuse_are_left_out_not_mangled() {
        let mut l = plain();
        l.features = vec!["ok-1".into(), "a+b".into(), "trail-".into(), "x".repeat(60), String::new()];
        l.partition = Some("a,b".into());
        let (pairs, left_out) = l.pairs();
        assert!(pairs.contains(&("slurm/feature.ok-1".into(), "true".into())), "{pairs:?}");
        assert!(!pairs.iter().any(|(k, _)| k == PARTITION), "{pairs:?}");
        assert_eq!(left_out.len(), 5, "{left_out:?}");
        assert!(parse_arg(&l.to_arg()).is_ok());
    }

    #[test]
    fn keys_and_values_follow_rays_rules() {
        assert!(valid_key("slurm/node") && valid_key("a.b-c/x_y.z") && valid_key("plain"));
        assert!(!valid_key("ray.io/node") && !valid_key("slurm/") && !valid_key("/x") && !valid_key("a..b/x"));
        assert!(!valid_key(&format!("slurm/{}", "x".repeat(64))));
        assert!(valid_value("a100") && valid_value("A.1-2_3") && !valid_value("a,b") && !valid_value("x_"));
        assert!(parse_arg("a=b=c").is_err() && parse_arg("novalue").is_err() && parse_arg("").unwrap().is_empty());
    }
}
