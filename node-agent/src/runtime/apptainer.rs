//! The Apptainer runtime (production default): `apptainer exec` of a SIF file
//! or a sandbox directory, unprivileged (a user namespace; Debian's build has
//! no setuid starter), on the host network:
//! - `--contain`: a minimal /dev, and empty /tmp and home; nothing of the
//!   host shows but syndeo's binds (the job's temp, /dev/shm and work
//!   directories, the site's extra binds, the allocated GPUs' devices);
//! - Ray's container: `--cleanenv`, its own PID namespace (`--pid`), and the
//!   job's temp dir as its home (`--home`): Ray's token file and caches never
//!   land in the user's real home;
//! - every container: Apptainer's own cache and configuration go to the
//!   job's temp dir (`APPTAINER_CACHEDIR`, `APPTAINER_CONFIGDIR`), never to
//!   `$HOME/.apptainer`, so a job leaves nothing there.
//! - GPUs: exactly the allocated ones. Apptainer's `--nv` binds every
//!   /dev/nvidia* of the node, so it is used only with `--nvccli`, where
//!   `NVIDIA_VISIBLE_DEVICES` limits the devices (and nvidia-container-cli
//!   brings the driver's libraries); without nvidia-container-cli on the node,
//!   syndeo binds the allocated GPUs' device files itself.
//!
//! - The container's environment, binds, home and work directory reach
//!   Apptainer in its own environment (`APPTAINERENV_*`, `APPTAINER_BIND`,
//!   `APPTAINER_HOME`, `APPTAINER_PWD`), which only the job's user and root
//!   can read, not on its command line, which every user of the node can.
//!
//! An agent that dies closes its launcher's stdin, and the launcher ends
//! everything in the container's PID namespace (Apptainer has no
//! die-with-parent).
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{gpu_binds, ContainerRuntime, ContainerSpec};
use crate::config::Bind;
use crate::fault::Fault;

pub struct Apptainer {
    pub binary: PathBuf,
}

/// Where nvidia-container-cli lives when the node has it.
const NVCCLI: &str = "/usr/bin/nvidia-container-cli";

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
            return Ok(());
        }
        let mut f = std::fs::File::open(real)
            .map_err(|e| Fault::user(format!("image {}: cannot open it as you: {e}", shown.display())))?;
        let mut head = [0u8; 48];
        let n = f.read(&mut head).unwrap_or(0);
        if n < 41 || &head[32..41] != b"SIF_MAGIC" {
            return Err(Fault::user(format!(
                "image {} is neither a SIF file nor a sandbox directory (its header is not Apptainer's: \
                 it is damaged or something else); build it with `apptainer build`",
                shown.display()
            )));
        }
        Ok(())
    }

    fn command(&self, spec: &ContainerSpec, argv: &[String]) -> Result<Vec<String>, Fault> {
        // --quiet: no INFO lines (which helpers the node lacks) in the job's
        // output on every `srun --syndeo`; warnings and errors still show.
        let mut c =
            vec![self.binary.to_string_lossy().into_owned(), "--quiet".into(), "exec".into(), "--contain".into()];
        if spec.clean_env {
            c.push("--cleanenv".into());
        }
        if spec.own_pid_namespace {
            c.push("--pid".into());
        }
        c.extend(self.gpu_args(spec, Path::new(NVCCLI).exists()));
        // Binds whose paths Apptainer's list cannot carry (a comma) stay here.
        for b in spec.binds.iter().filter(|b| !listable(b)) {
            c.extend(["--bind".into(), bind_arg(b)]);
        }
        c.push(spec.image.to_string_lossy().into_owned());
        c.extend(argv.iter().cloned());
        Ok(c)
    }

    /// Apptainer's state dirs, and what Apptainer reads from its
    /// environment rather than its command line, which every user of the
    /// node can read: the container's environment (`APPTAINERENV_*`), the
    /// binds (`APPTAINER_BIND`), the home and the work directory.
    fn process_env(&self, spec: &ContainerSpec) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if let Some(dir) = &spec.runtime_state {
            env.push(("APPTAINER_CACHEDIR".into(), dir.join(".apptainer/cache").to_string_lossy().into_owned()));
            env.push(("APPTAINER_CONFIGDIR".into(), dir.join(".apptainer").to_string_lossy().into_owned()));
        }
        if let Some(home) = &spec.home {
            env.push(("APPTAINER_HOME".into(), home.to_string_lossy().into_owned()));
        }
        let binds: Vec<String> = spec.binds.iter().filter(|b| listable(b)).map(bind_arg).collect();
        if !binds.is_empty() {
            env.push(("APPTAINER_BIND".into(), binds.join(",")));
        }
        // With a home, Apptainer sets HOME itself and warns about a HOME of
        // the environment ("Overriding HOME ... is not permitted") in the job's output.
        for (k, v) in spec.env.iter().filter(|(k, _)| !(k == "HOME" && spec.home.is_some())) {
            env.push((format!("APPTAINERENV_{k}"), v.clone()));
        }
        env.push(("APPTAINER_PWD".into(), spec.workdir.to_string_lossy().into_owned()));
        env
    }
}

/// A bind as Apptainer spells it: `SRC:DST[:ro]`.
fn bind_arg(b: &Bind) -> String {
    let mut v = format!("{}:{}", b.src.display(), b.dst.display());
    if b.ro {
        v.push_str(":ro");
    }
    v
}

/// Whether a bind can go in `APPTAINER_BIND`, a comma-separated list.
fn listable(b: &Bind) -> bool {
    !bind_arg(b).contains(',')
}

impl Apptainer {
    /// The allocated GPUs, and only those: with nvidia-container-cli, by
    /// index; without, their device files (which must exist).
    fn gpu_args(&self, spec: &ContainerSpec, nvccli: bool) -> Vec<String> {
        if spec.gpu_devices.is_empty() {
            return vec![];
        }
        if nvccli {
            return vec![
                "--nv".into(),
                "--nvccli".into(),
                "--env".into(),
                format!("NVIDIA_VISIBLE_DEVICES={}", spec.gpu_ids.join(",")),
            ];
        }
        gpu_binds(&spec.gpu_devices)
            .into_iter()
            .filter(|d| d.exists())
            .flat_map(|d| ["--bind".to_string(), d.to_string_lossy().into_owned()])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bind;

    fn ray_spec() -> ContainerSpec {
        ContainerSpec {
            image: "/images/ray.sif".into(),
            binds: vec![Bind::rw("/run/syndeo/9"), Bind { src: "/data".into(), dst: "/d".into(), ro: true }],
            env: vec![("HOME".into(), "/tmp/syndeo/9".into()), ("RAY_AUTH_MODE".into(), "token".into())],
            clean_env: true,
            workdir: "/home/u".into(),
            home: Some("/tmp/syndeo/9".into()),
            runtime_state: Some("/tmp/syndeo/9".into()),
            gpu_ids: vec![],
            gpu_devices: vec![],
            own_pid_namespace: true,
        }
    }

    #[test]
    fn ray_container_is_contained_clean_with_its_own_pids_and_its_paths_and_env_off_the_command_line() {
        let c = Apptainer { binary: "/usr/bin/apptainer".into() }
            .command(&ray_spec(), &["ray".into(), "start".into()])
            .unwrap();
        assert_eq!(
            c,
            [
                "/usr/bin/apptainer",
                "--quiet",
                "exec",
                "--contain",
                "--cleanenv",
                "--pid",
                "/images/ray.sif",
                "ray",
                "start"
            ]
        );
        let env: std::collections::HashMap<String, String> =
            Apptainer { binary: "/x".into() }.process_env(&ray_spec()).into_iter().collect();
        assert_eq!(env["APPTAINER_BIND"], "/run/syndeo/9:/run/syndeo/9,/data:/d:ro");
        assert_eq!(env["APPTAINERENV_RAY_AUTH_MODE"], "token");
        assert!(!env.contains_key("APPTAINERENV_HOME"), "a home of Apptainer's, not an env HOME: {env:?}");
        assert_eq!((env["APPTAINER_HOME"].as_str(), env["APPTAINER_PWD"].as_str()), ("/tmp/syndeo/9", "/home/u"));
        assert!(env["APPTAINER_CACHEDIR"].starts_with("/tmp/syndeo/9/"), "{env:?}");
    }

    #[test]
    fn a_bind_with_a_comma_stays_on_the_command_line() {
        let mut spec = ray_spec();
        spec.binds.push(Bind::rw("/data/a,b"));
        let c = Apptainer { binary: "/x".into() }.command(&spec, &[]).unwrap();
        assert!(c.windows(2).any(|w| w[0] == "--bind" && w[1] == "/data/a,b:/data/a,b"), "{c:?}");
        let env = Apptainer { binary: "/x".into() }.process_env(&spec);
        assert!(env.iter().all(|(_, v)| !v.contains("a,b")), "{env:?}");
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
    fn gpus_are_the_allocated_ones_only_by_index_with_nvccli_or_as_device_binds_without() {
        let d = tempfile::tempdir().unwrap();
        let dev = d.path().join("nvidia9");
        std::fs::write(&dev, b"").unwrap();
        let mut spec = ray_spec();
        spec.gpu_ids = vec!["1".into()];
        spec.gpu_devices = vec![dev.clone()];
        let a = Apptainer { binary: "/usr/bin/apptainer".into() };
        let with = a.gpu_args(&spec, true);
        assert_eq!(with, ["--nv", "--nvccli", "--env", "NVIDIA_VISIBLE_DEVICES=1"]);
        let without = a.gpu_args(&spec, false);
        assert_eq!(
            without,
            ["--bind".to_string(), dev.to_string_lossy().into_owned()],
            "no --nv: it would bind every GPU"
        );
    }

    #[test]
    fn a_file_that_is_not_a_sif_is_refused_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("ray.sif");
        std::fs::write(&f, b"#!/bin/sh\necho not an image at all, just a script pretending\n").unwrap();
        let e = Apptainer { binary: "/x".into() }.check_format(&f, &f).unwrap_err().to_string();
        assert!(e.contains("ray.sif") && e.contains("neither a SIF file"), "{e}");
        let mut sif = b"#!/usr/bin/env run-singularity\n\0".to_vec();
        sif.extend_from_slice(b"SIF_MAGIC\0rest");
        std::fs::write(&f, sif).unwrap();
        assert!(Apptainer { binary: "/x".into() }.check_format(&f, &f).is_ok());
    }

    #[test]
    fn missing_apptainer_is_reported_as_a_node_fault() {
        let d = tempfile::tempdir().unwrap();
        let rt = Apptainer { binary: "/nonexistent/apptainer".into() };
        let e = crate::runtime::check_image(&rt, d.path(), &[]).unwrap_err();
        assert!(e.is_node(), "{e}");
    }
}
