//! The line a driver run on the host gets when its Ray (or Python) differs
//! from the cluster's: `sitecustomize.py` in the job dir's `python/`, which
//! the job's steps get first on their PYTHONPATH (`Shared::step_env`), and
//! beside it the cluster's versions, written once this node's Ray loaded.
//! `srun --syndeo` containers do not get it (`exec.rs` takes it out).
use std::path::Path;

use super::ray_version::ImageRay;
use crate::fault::Fault;
use crate::job::JobSpec;

pub const HOOK_SCRIPT: &str = include_str!("sitecustomize.py");
pub const CLUSTER_FILE: &str = "syndeo_cluster.json";

/// Writes the hook into the job dir (the user's, so as the user).
pub fn install(spec: &JobSpec) -> Result<(), Fault> {
    let dir = spec.dir().python_hook();
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("sitecustomize.py"), HOOK_SCRIPT)
    };
    write().map_err(|e| Fault::node(format!("writing the driver hook in {}: {e}", dir.display())))
}

/// Records the versions the cluster's Ray runs on this node.
pub fn record(spec: &JobSpec, found: &ImageRay) -> Result<(), Fault> {
    let path = spec.dir().python_hook().join(CLUSTER_FILE);
    let json = serde_json::json!({ "ray": found.ray, "python": found.python, "python_minor": found.python_minor() });
    write_atomically(&path, &json.to_string()).map_err(|e| Fault::node(format!("writing {}: {e}", path.display())))
}

fn write_atomically(path: &Path, content: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content)?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs `python3 -c CODE` with the hook dir first on PYTHONPATH, then a
    /// dir with a stand-in Ray of version `host_ray` (None: no Ray) and a
    /// sitecustomize of its own; returns stderr and stdout.
    fn run(cluster: Option<(&str, &str)>, host_ray: Option<&str>, code: &str) -> (String, String) {
        let hook = tempfile::tempdir().unwrap();
        std::fs::write(hook.path().join("sitecustomize.py"), HOOK_SCRIPT).unwrap();
        if let Some((ray, minor)) = cluster {
            let json = serde_json::json!({ "ray": ray, "python": format!("{minor}.1"), "python_minor": minor });
            std::fs::write(hook.path().join(CLUSTER_FILE), json.to_string()).unwrap();
        }
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("sitecustomize.py"), "print('OTHER SITECUSTOMIZE')\n").unwrap();
        if let Some(v) = host_ray {
            std::fs::create_dir(host.path().join("ray")).unwrap();
            std::fs::write(host.path().join("ray/__init__.py"), "").unwrap();
            std::fs::write(host.path().join("ray/_version.py"), format!("version = \"{v}\"\n")).unwrap();
        }
        let path = format!("{}:{}", hook.path().display(), host.path().display());
        let o = Command::new("/usr/bin/python3").args(["-c", code]).env("PYTHONPATH", path).output().unwrap();
        (String::from_utf8_lossy(&o.stderr).into_owned(), String::from_utf8_lossy(&o.stdout).into_owned())
    }

    fn python_minor() -> String {
        let o =
            Command::new("/usr/bin/python3").args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).output();
        String::from_utf8_lossy(&o.unwrap().stdout).trim().to_string()
    }

    #[test]
    fn a_host_driver_whose_ray_differs_gets_one_line_naming_both_and_srun_syndeo() {
        let minor = python_minor();
        let (err, out) = run(Some(("2.60.0", &minor)), Some("2.40.0"), "import ray; import ray");
        assert_eq!(err.matches("syndeo:").count(), 1, "{err}");
        assert!(
            err.contains("has Ray 2.40.0") && err.contains("runs Ray 2.60.0") && err.contains("srun --syndeo"),
            "{err}"
        );
        assert!(out.contains("OTHER SITECUSTOMIZE"), "the hidden sitecustomize did not run: {out}");
    }

    #[test]
    fn a_host_without_ray_is_told_to_use_srun_syndeo_and_a_matching_one_hears_nothing() {
        let minor = python_minor();
        let (err, _) = run(Some(("2.60.0", &minor)), None, "import ray");
        assert!(err.contains("has no Ray") && err.contains("ModuleNotFoundError"), "{err}");
        let (err, _) = run(Some(("2.60.0", &minor)), Some("2.60.0"), "import ray");
        assert!(!err.contains("syndeo"), "{err}");
        let (err, _) = run(None, Some("2.40.0"), "import json");
        assert!(err.is_empty(), "{err}");
    }
}
