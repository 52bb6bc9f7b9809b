//! The bubblewrap runtime: a root filesystem directory, run with `bwrap` in a
//! new user namespace (same uid), capabilities dropped, host network, in a
//! session of its own (`--new-session`: no process of the image shares the
//! user's terminal as its controlling terminal, so none can push input into
//! it with TIOCSTI; CVE-2017-5226). The image's top-level directories are
//! bound read-only onto a fresh tmpfs root, so the job's bind mounts can
//! create their mount points.
use std::path::{Path, PathBuf};

use super::{gpu_binds, ContainerRuntime, ContainerSpec};
use crate::fault::Fault;

pub struct Bubblewrap {
    pub binary: PathBuf,
}

/// Top-level names that the container gets fresh (or from the host), never from the image.
const NOT_FROM_IMAGE: &[&str] =
    &["dev", "proc", "sys", "tmp", "run", "home", "root", "mnt", "media", "srv", "boot", "lost+found"];

/// Host files bound read-only so the user's name, the node names and DNS resolve inside.
const HOST_FILES: &[&str] = &["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/resolv.conf"];

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

impl ContainerRuntime for Bubblewrap {
    fn name(&self) -> &'static str {
        "bubblewrap"
    }

    fn binary(&self) -> &Path {
        &self.binary
    }

    fn check_format(&self, real: &Path, image: &Path) -> Result<(), Fault> {
        if !real.is_dir() {
            return Err(Fault::user(format!(
                "image {} is not a directory; the bubblewrap runtime needs a root filesystem directory",
                image.display()
            )));
        }
        std::fs::read_dir(real)
            .map_err(|e| Fault::user(format!("image {}: cannot list it as you: {e}", image.display())))?;
        if !real.join("usr").is_dir() {
            return Err(Fault::user(format!("image {} has no /usr; is it a root filesystem?", image.display())));
        }
        Ok(())
    }

    fn command(&self, spec: &ContainerSpec, argv: &[String]) -> Result<Vec<String>, Fault> {
        let mut c: Vec<String> = vec![s(&self.binary), "--unshare-user".into()];
        if spec.own_pid_namespace {
            c.push("--unshare-pid".into());
        }
        c.extend(["--new-session".into(), "--die-with-parent".into(), "--tmpfs".into(), "/".into()]);
        let entries =
            std::fs::read_dir(&spec.image).map_err(|e| Fault::user(format!("image {}: {e}", spec.image.display())))?;
        let mut names: Vec<(String, PathBuf)> =
            entries.filter_map(|e| e.ok()).map(|e| (e.file_name().to_string_lossy().into_owned(), e.path())).collect();
        names.sort();
        for (name, path) in names {
            if name.starts_with('.') || NOT_FROM_IMAGE.contains(&name.as_str()) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Fault::user(format!("{}: {e}", path.display())))?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| Fault::user(format!("{}: {e}", path.display())))?;
                c.extend(["--symlink".into(), s(&target), format!("/{name}")]);
            } else if meta.is_dir() {
                c.extend(["--ro-bind".into(), s(&path), format!("/{name}")]);
            }
        }
        // /tmp and /var/tmp are the container's own and writable, as under
        // Apptainer; binds beneath them (Ray's temp dir, /var/tmp/syndeo under
        // Slurm's per-job /tmp) get their mount points there, not in the
        // image's read-only /var.
        c.extend(["--dev".into(), "/dev".into(), "--proc".into(), "/proc".into()]);
        c.extend(["--tmpfs".into(), "/tmp".into(), "--tmpfs".into(), "/var/tmp".into()]);
        for f in HOST_FILES {
            c.extend(["--ro-bind-try".into(), f.to_string(), f.to_string()]);
        }
        for b in &spec.binds {
            c.extend([if b.ro { "--ro-bind" } else { "--bind" }.into(), s(&b.src), s(&b.dst)]);
        }
        for d in gpu_binds(&spec.gpu_devices) {
            c.extend(["--dev-bind-try".into(), s(&d), s(&d)]);
        }
        c.extend(["--cap-drop".into(), "ALL".into()]);
        if spec.clean_env {
            c.push("--clearenv".into());
        }
        for (k, v) in &spec.env {
            c.extend(["--setenv".into(), k.clone(), v.clone()]);
        }
        c.extend(["--chdir".into(), s(&spec.workdir), "--".into()]);
        c.extend(argv.iter().cloned());
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bind;

    fn fake_image() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("usr/bin")).unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        std::fs::create_dir_all(d.path().join("home")).unwrap();
        std::os::unix::fs::symlink("usr/bin", d.path().join("bin")).unwrap();
        d
    }

    fn spec(img: &Path) -> ContainerSpec {
        ContainerSpec {
            image: img.into(),
            binds: vec![Bind::rw("/run/syndeo/7")],
            env: vec![("RAY_AUTH_MODE".into(), "token".into())],
            clean_env: true,
            workdir: "/home/u".into(),
            home: None,
            runtime_state: None,
            gpu_ids: vec![],
            gpu_devices: vec![],
            own_pid_namespace: true,
        }
    }

    fn has(c: &[String], seq: &[&str]) -> bool {
        c.windows(seq.len()).any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
    }

    #[test]
    fn image_dirs_are_read_only_and_symlinks_recreated() {
        let img = fake_image();
        let c = Bubblewrap { binary: "/usr/bin/bwrap".into() }.command(&spec(img.path()), &["ray".into()]).unwrap();
        let usr = img.path().join("usr").to_string_lossy().into_owned();
        assert!(has(&c, &["--ro-bind", &usr, "/usr"]), "{c:?}");
        assert!(has(&c, &["--symlink", "usr/bin", "/bin"]), "{c:?}");
        assert!(!c.iter().any(|a| a.ends_with("/home") && a.starts_with(&*img.path().to_string_lossy())), "{c:?}");
    }

    #[test]
    fn isolation_flags_binds_env_and_command_are_in_place() {
        let img = fake_image();
        let c = Bubblewrap { binary: "/usr/bin/bwrap".into() }
            .command(&spec(img.path()), &["python3".into(), "x.py".into()])
            .unwrap();
        for seq in [
            &["--unshare-user"][..],
            &["--unshare-pid"],
            &["--die-with-parent"],
            &["--cap-drop", "ALL"],
            &["--clearenv"],
            &["--bind", "/run/syndeo/7", "/run/syndeo/7"],
            &["--setenv", "RAY_AUTH_MODE", "token"],
            &["--chdir", "/home/u", "--", "python3", "x.py"],
        ] {
            assert!(has(&c, seq), "missing {seq:?} in {c:?}");
        }
        assert!(!c.contains(&"--share-net".to_string()) && !c.contains(&"--unshare-net".to_string()));
    }

    /// `srun --syndeo` and `syndeo exec` may run on the user's terminal: the
    /// image must not get it as its controlling terminal (TIOCSTI).
    #[test]
    fn every_container_runs_in_a_new_session_the_exec_ones_on_a_terminal_included() {
        let img = fake_image();
        let mut exec = spec(img.path());
        exec.clean_env = false;
        exec.own_pid_namespace = false;
        for sp in [spec(img.path()), exec] {
            let c = Bubblewrap { binary: "/usr/bin/bwrap".into() }.command(&sp, &["python3".into()]).unwrap();
            let at = c.iter().position(|a| a == "--new-session").unwrap_or_else(|| panic!("no --new-session: {c:?}"));
            assert!(at < c.iter().position(|a| a == "--").unwrap(), "an option of bwrap's, not of the command: {c:?}");
        }
    }

    /// The image's /var is bound read-only: a bind in /var/tmp needs a
    /// writable /var/tmp beneath it to make its mount point.
    #[test]
    fn a_bind_under_var_tmp_lands_on_the_containers_own_var_tmp() {
        let img = fake_image();
        std::fs::create_dir_all(img.path().join("var/tmp")).unwrap();
        let mut sp = spec(img.path());
        sp.binds.push(Bind { src: "/var/tmp/syndeo/7".into(), dst: "/var/tmp/syndeo/7".into(), ro: false });
        let c = Bubblewrap { binary: "/usr/bin/bwrap".into() }.command(&sp, &[]).unwrap();
        let at = |w: &[&str]| c.windows(w.len()).position(|x| x == w).unwrap_or_else(|| panic!("no {w:?}: {c:?}"));
        let var = at(&["--ro-bind", &img.path().join("var").to_string_lossy(), "/var"]);
        let tmpfs = at(&["--tmpfs", "/var/tmp"]);
        let bind = at(&["--bind", "/var/tmp/syndeo/7", "/var/tmp/syndeo/7"]);
        assert!(var < tmpfs && tmpfs < bind, "{c:?}");
    }

    #[test]
    fn exec_spec_keeps_env_and_pid_namespace_of_host() {
        let img = fake_image();
        let mut sp = spec(img.path());
        sp.clean_env = false;
        sp.own_pid_namespace = false;
        let c = Bubblewrap { binary: "/usr/bin/bwrap".into() }.command(&sp, &[]).unwrap();
        assert!(!c.contains(&"--clearenv".to_string()) && !c.contains(&"--unshare-pid".to_string()));
    }

    #[test]
    fn image_that_is_a_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("ray.sif");
        std::fs::write(&f, b"x").unwrap();
        let e = Bubblewrap { binary: "/usr/bin/bwrap".into() }.check_format(&f, &f).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
