//! What the job was given on this node, from the prolog's environment:
//! `SLURM_JOB_CPUS_PER_NODE` ("2(x3),1": counts with repeat factors, in node
//! list order) and GPU ids (`SLURM_JOB_GPUS` / `CUDA_VISIBLE_DEVICES`).
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
        out.extend(std::iter::repeat(count).take(repeat));
    }
    Ok(out)
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
    fn gpu_ids_are_split_and_empty_means_none() {
        assert_eq!(gpu_ids(Some("0,3")), vec!["0", "3"]);
        assert!(gpu_ids(Some("")).is_empty());
        assert!(gpu_ids(Some("NoDevFiles")).is_empty());
        assert!(gpu_ids(None).is_empty());
    }
}
