//! Container runtimes behind one trait. The agent (as the job user) asks a
//! runtime for the command line that runs a program in the job's image; the
//! runtime never runs anything itself.
//!
//! - `apptainer` (production default): SIF file or sandbox directory.
//! - `bubblewrap`: a root filesystem directory; the backend tested here.
//!
//! Both share the host network (Ray's nodes talk over it), run as the user
//! with no capabilities, and bind the job's work dir and runtime dirs at the
//! same paths inside as outside.
mod apptainer;
mod bubblewrap;

use std::path::{Path, PathBuf};

pub use apptainer::Apptainer;
pub use bubblewrap::Bubblewrap;

use crate::config::{Bind, Config, RuntimeKind};
use crate::fault::Fault;

/// What to run in the image and how.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub image: PathBuf,
    pub binds: Vec<Bind>,
    /// Variables set inside; with `clean_env` the only ones (besides the runtime's own).
    pub env: Vec<(String, String)>,
    pub clean_env: bool,
    pub workdir: PathBuf,
    /// The container's home (Ray's: the job's temp dir); None: the runtime's default.
    pub home: Option<PathBuf>,
    /// Where the runtime keeps its own configuration and cache (the job's
    /// temp dir, removed at job end); None: the runtime's default (the
    /// user's home).
    pub runtime_state: Option<PathBuf>,
    /// The GPUs allocated on this node: Slurm's indices, and their device files.
    pub gpu_ids: Vec<String>,
    pub gpu_devices: Vec<PathBuf>,
    /// Own PID namespace: ending its first process ends everything in it.
    pub own_pid_namespace: bool,
}

pub trait ContainerRuntime: Send + Sync {
    fn name(&self) -> &'static str;
    /// The runtime's program (checked to exist before a job uses it).
    fn binary(&self) -> &Path;
    /// Checks, as the calling user, that the resolved image `real` (named
    /// `shown` by the user) has a form this runtime runs; says what to fix.
    fn check_format(&self, real: &Path, shown: &Path) -> Result<(), Fault>;
    /// The full command line that runs `argv` in the image.
    fn command(&self, spec: &ContainerSpec, argv: &[String]) -> Result<Vec<String>, Fault>;
    /// Variables for the runtime's own process (not the container's).
    fn process_env(&self, _spec: &ContainerSpec) -> Vec<(String, String)> {
        vec![]
    }
}

pub fn from_config(c: &Config) -> Box<dyn ContainerRuntime> {
    match c.runtime {
        RuntimeKind::Apptainer => Box::new(Apptainer { binary: c.apptainer.clone() }),
        RuntimeKind::Bubblewrap => Box::new(Bubblewrap { binary: c.bwrap.clone() }),
    }
}

/// Everything checked before a job uses `image`, as the job user (so an image
/// that root could read but the user cannot is refused): it exists, lies
/// where the site allows images, has the runtime's form, and the runtime is
/// installed. Returns the resolved path; the message says what to fix.
pub fn check_image(rt: &dyn ContainerRuntime, image: &Path, allowed: &[PathBuf]) -> Result<PathBuf, Fault> {
    let real = check_image_common(image, allowed)?;
    rt.check_format(&real, image)?;
    // A directory image: nothing inside may be another user's to change.
    if real.is_dir() {
        crate::image_tree::check(&real, image)?;
    }
    if !rt.binary().exists() {
        return Err(Fault::node(format!(
            "the container runtime {} ({}) is not installed on this node; ask the admins",
            rt.name(),
            rt.binary().display()
        )));
    }
    Ok(real)
}

/// An image another user can change (their own, or writable by group or
/// others) could run their code as the job's user while the job runs it: it
/// must be root's or the job user's, and writable only by its owner. For a
/// sandbox or root filesystem directory, its top and its /usr are checked.
fn check_owner(real: &Path, shown: &Path) -> Result<(), Fault> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::getuid().as_raw();
    let mut paths = vec![real.to_path_buf()];
    if real.is_dir() {
        paths.push(real.join("usr"));
    }
    for p in paths {
        let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
        if m.uid() != 0 && m.uid() != me {
            let owner =
                nix::unistd::User::from_uid(m.uid().into()).ok().flatten().map_or(m.uid().to_string(), |u| u.name);
            return Err(Fault::user(format!(
                "image {} belongs to another user ({owner}), who could change it while your job runs it; \
                 use an image of yours or of the site's (owned by root)",
                shown.display()
            )));
        }
        if m.mode() & 0o022 != 0 && !m.file_type().is_symlink() {
            return Err(Fault::user(format!(
                "image {} ({}) is writable by other users (mode {:o}), who could change it while your job runs it; \
                 remove group and other write permission",
                shown.display(),
                p.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Checks shared by both runtimes: the image exists, the user can read it,
/// and it lies where the site allows images (compared after resolving links
/// on both sides, so a link cannot lead out of an allowed directory).
pub fn check_image_common(image: &Path, allowed: &[PathBuf]) -> Result<PathBuf, Fault> {
    let real = std::fs::canonicalize(image).map_err(|e| {
        Fault::User(match e.kind() {
            std::io::ErrorKind::NotFound => {
                format!("image {} does not exist; check the --syndeo path", image.display())
            }
            std::io::ErrorKind::PermissionDenied => {
                format!("image {} is not readable by you (permission denied); fix its permissions", image.display())
            }
            _ => format!("image {}: {e}", image.display()),
        })
    })?;
    check_owner(&real, image)?;
    let inside = |d: &PathBuf| real.starts_with(std::fs::canonicalize(d).unwrap_or_else(|_| d.clone()));
    if !allowed.is_empty() && !allowed.iter().any(inside) {
        let dirs: Vec<String> = allowed.iter().map(|d| d.display().to_string()).collect();
        return Err(Fault::user(format!(
            "image {} is outside the directories this site allows for images ({}); use an image from there",
            image.display(),
            dirs.join(", ")
        )));
    }
    Ok(real)
}

/// The device files to bind for the allocated GPUs: theirs, and NVIDIA's
/// control devices (shared by all GPUs; each bound only if it exists).
pub fn gpu_binds(devices: &[PathBuf]) -> Vec<PathBuf> {
    if devices.is_empty() {
        return vec![];
    }
    let mut devs = devices.to_vec();
    for d in ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] {
        devs.push(d.into());
    }
    devs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_others_can_write_is_refused_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("usr")).unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_image_common(d.path(), &[]).unwrap_err().to_string();
        assert!(e.contains("writable by other users") && e.contains(&d.path().display().to_string()), "{e}");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_image_common(d.path(), &[]).is_ok());
    }

    #[test]
    fn missing_image_names_the_path() {
        let e = check_image_common(Path::new("/nonexistent/img.sif"), &[]).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/img.sif") && e.contains("does not exist"), "{e}");
    }

    #[test]
    fn allow_list_refuses_images_elsewhere() {
        let d = tempfile::tempdir().unwrap();
        let e = check_image_common(d.path(), &["/shared/images".into()]).unwrap_err().to_string();
        assert!(e.contains("outside the directories"), "{e}");
        assert!(check_image_common(d.path(), &[d.path().to_path_buf()]).is_ok());
    }

    #[test]
    fn a_link_inside_an_allowed_dir_cannot_lead_out_of_it() {
        let allowed = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), allowed.path().join("img")).unwrap();
        let e =
            check_image_common(&allowed.path().join("img"), &[allowed.path().to_path_buf()]).unwrap_err().to_string();
        assert!(e.contains("outside the directories"), "{e}");
    }

    #[test]
    fn missing_runtime_binary_is_a_node_fault_after_the_image_checks() {
        let img = tempfile::tempdir().unwrap();
        std::fs::create_dir(img.path().join("usr")).unwrap();
        let rt = Bubblewrap { binary: "/nonexistent/bwrap".into() };
        let e = check_image(&rt, img.path(), &[]).unwrap_err();
        assert!(e.is_node() && e.to_string().contains("/nonexistent/bwrap"), "{e}");
        let e = check_image(&rt, Path::new("/nonexistent/image"), &[]).unwrap_err();
        assert!(!e.is_node() && e.to_string().contains("does not exist"), "a user's mistake is reported as such: {e}");
    }

    #[test]
    fn the_allocated_devices_are_bound_with_the_control_devices_and_no_others() {
        assert!(gpu_binds(&[]).is_empty());
        let d = gpu_binds(&["/dev/stand/gpu7".into()]);
        assert_eq!(d[0], PathBuf::from("/dev/stand/gpu7"));
        assert!(d.contains(&PathBuf::from("/dev/nvidiactl")) && !d.iter().any(|p| p.ends_with("nvidia0")));
    }
}
