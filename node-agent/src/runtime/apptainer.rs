//! The Apptainer runtime (production default): `apptainer exec` of a SIF file
//! or sandbox directory, host network, `--contain` so nothing of the host but
//! the binds shows, `--cleanenv` for Ray's container, `--pid` for its own PID
//! namespace and `--nv` when GPUs are allocated. Apptainer cannot be installed
//! on syndeo's CI machines: this backend is unit-tested for its command lines
//! only; the code around it is the same as for bubblewrap.
use std::path::{Path, PathBuf};

use super::{ContainerRuntime, ContainerSpec};
use crate::fault::Fault;

pub struct Apptainer {
    pub binary: PathBuf,
}

impl ContainerRuntime for Apptainer {
    fn name(&self) -> &'static str {
        "apptainer"
    }

    fn binary(&self) -> &Path {
        &self.binary
    }

    fn check_format(&self, real: &Path, shown: &Path) -> Result<(), Fault> {
        if real.is_dir() {
            std::fs::read_dir(real)
                .map_err(|e| Fault::user(format!("image {}: cannot list it as you: {e}", shown.display())))?;
        } else {
            std::fs::File::open(real)
                .map_err(|e| Fault::user(format!("image {}: cannot open it as you: {e}", shown.display())))?;
        }
        Ok(())
    }

    fn command(&self, spec: &ContainerSpec, argv: &[String]) -> Result<Vec<String>, Fault> {
        let mut c = vec![self.binary.to_string_lossy().into_owned(), "exec".into(), "--contain".into()];
        if spec.clean_env {
            c.push("--cleanenv".into());
        }
        if spec.own_pid_namespace {
            c.push("--pid".into());
        }
        if !spec.gpus.is_empty() {
            c.push("--nv".into());
        }
        for b in &spec.binds {
            let mut v = format!("{}:{}", b.src.display(), b.dst.display());
            if b.ro {
                v.push_str(":ro");
            }
            c.extend(["--bind".into(), v]);
        }
        for (k, v) in &spec.env {
            c.extend(["--env".into(), format!("{k}={v}")]);
        }
        c.extend(["--pwd".into(), spec.workdir.to_string_lossy().into_owned()]);
        c.push(spec.image.to_string_lossy().into_owned());
        c.extend(argv.iter().cloned());
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Bind;

    #[test]
    fn ray_container_is_contained_clean_with_own_pids_and_gpus() {
        let spec = ContainerSpec {
            image: "/images/ray.sif".into(),
            binds: vec![Bind::rw("/run/syndeo/9"), Bind { src: "/data".into(), dst: "/d".into(), ro: true }],
            env: vec![("RAY_AUTH_MODE".into(), "token".into())],
            clean_env: true,
            workdir: "/home/u".into(),
            gpus: vec!["0".into()],
            own_pid_namespace: true,
        };
        let c =
            Apptainer { binary: "/usr/bin/apptainer".into() }.command(&spec, &["ray".into(), "start".into()]).unwrap();
        assert_eq!(
            c,
            [
                "/usr/bin/apptainer",
                "exec",
                "--contain",
                "--cleanenv",
                "--pid",
                "--nv",
                "--bind",
                "/run/syndeo/9:/run/syndeo/9",
                "--bind",
                "/data:/d:ro",
                "--env",
                "RAY_AUTH_MODE=token",
                "--pwd",
                "/home/u",
                "/images/ray.sif",
                "ray",
                "start"
            ]
        );
    }

    #[test]
    fn exec_container_keeps_the_job_environment() {
        let spec = ContainerSpec { image: "/i.sif".into(), workdir: "/w".into(), ..Default::default() };
        let c = Apptainer { binary: "/usr/bin/apptainer".into() }.command(&spec, &[]).unwrap();
        assert!(
            !c.contains(&"--cleanenv".to_string())
                && !c.contains(&"--pid".to_string())
                && !c.contains(&"--nv".to_string())
        );
    }

    #[test]
    fn missing_apptainer_is_reported_as_a_node_fault() {
        let d = tempfile::tempdir().unwrap();
        let rt = Apptainer { binary: "/nonexistent/apptainer".into() };
        let e = crate::runtime::check_image(&rt, d.path(), &[]).unwrap_err();
        assert!(e.is_node(), "{e}");
    }
}
