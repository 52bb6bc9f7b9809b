//! The probes of `check`: what an unprivileged user can do on this node,
//! tried for real. Root makes a private temp dir (mode 0700, the user's),
//! starts this very binary in it as `syndeo-agent check-probe`, which drops
//! to the user for good (as the job side does, `root::privdrop`) and then
//! creates a user namespace, or asks the runtime its version and starts a
//! container. It prints its findings as JSON; root removes the dir after.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use nix::unistd::{chown, mkdtemp, Gid, Uid};

use super::command::{last_words, run_bounded, PATH};
use super::facts::{Outcome, ProbeReport};
use super::{ProbeRequest, ProbeUser};
use crate::cli::ProbeArgs;
use crate::config::RuntimeKind;
use crate::root::privdrop::{drop_to, Identity};

/// The longest a whole probe may take (a SIF unpacked without FUSE is slow).
const PROBE_LIMIT: Duration = Duration::from_secs(150);
const VERSION_LIMIT: Duration = Duration::from_secs(30);
const START_LIMIT: Duration = Duration::from_secs(120);

/// A fresh directory in /tmp for one probe, the probe user's; removed when dropped.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(user: &ProbeUser) -> Result<PrivateDir> {
        let path = mkdtemp("/tmp/syndeo-check.XXXXXX").context("creating the probe's temp dir in /tmp")?;
        let dir = PrivateDir(path);
        // The entry is root's in sticky /tmp: no user can move it between the two calls.
        chown(&dir.0, Some(Uid::from_raw(user.uid)), Some(Gid::from_raw(user.gid)))
            .with_context(|| format!("handing {} to {}", dir.0.display(), user.name))?;
        Ok(dir)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!("could not remove the probe's temp dir {}: {e}", self.0.display());
        }
    }
}

/// Root's side: runs `req` as `user` and reads its findings.
pub fn run(req: &ProbeRequest, user: &ProbeUser) -> Result<ProbeReport> {
    let dir = PrivateDir::create(user)?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg0("syndeo-agent")
        .arg("check-probe")
        .args(["--uid", &user.uid.to_string(), "--gid", &user.gid.to_string()])
        .arg("--request")
        .arg(serde_json::to_string(req)?)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &dir.0)
        .env("TMPDIR", &dir.0)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name)
        .current_dir(&dir.0);
    let out = run_bounded(&mut cmd, PROBE_LIMIT)?;
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("the probe as {} failed: {}", user.name, last_words(&out)))
}

/// The probe's side (`syndeo-agent check-probe`): becomes the user, tries, reports.
pub fn child(a: &ProbeArgs) -> Result<()> {
    let req: ProbeRequest = serde_json::from_str(&a.request).context("the probe's request")?;
    drop_to(&Identity::lookup(a.uid, a.gid)?)?;
    let dir = std::env::current_dir().context("the probe's temp dir")?;
    let report = match req {
        ProbeRequest::UserNamespace => ProbeReport { userns: Some(unshare_user()), ..Default::default() },
        ProbeRequest::Runtime { kind, binary, image } => runtime(kind, &binary, image.as_deref(), &dir),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// A user namespace of the probe's own (it ends with the probe).
fn unshare_user() -> Outcome {
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
        Ok(()) => Outcome::ok("unshare(CLONE_NEWUSER)"),
        Err(e) => Outcome::failed(format!("unshare(CLONE_NEWUSER): {e}")),
    }
}

fn runtime(kind: RuntimeKind, binary: &Path, image: Option<&Path>, dir: &Path) -> ProbeReport {
    let version = attempt(Command::new(binary).arg("--version"), VERSION_LIMIT);
    let version = Outcome { text: version.text.lines().next().unwrap_or_default().to_string(), ..version };
    if !version.ok {
        return ProbeReport { version: Some(version), ..Default::default() };
    }
    let start = start_command(kind, binary, image).map(|argv| {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        for (var, sub) in
            [("APPTAINER_CACHEDIR", "cache"), ("APPTAINER_CONFIGDIR", "config"), ("APPTAINER_TMPDIR", "tmp")]
        {
            let _ = std::fs::create_dir(dir.join(sub));
            cmd.env(var, dir.join(sub));
        }
        let o = attempt(&mut cmd, START_LIMIT);
        if o.ok {
            Outcome::ok(argv.join(" "))
        } else {
            o
        }
    });
    ProbeReport { version: Some(version), start, ..Default::default() }
}

/// The container a probe starts: bubblewrap over the host's root,
/// read-only, in new user and PID namespaces; Apptainer in `image`. None:
/// Apptainer without an image.
pub fn start_command(kind: RuntimeKind, binary: &Path, image: Option<&Path>) -> Option<Vec<String>> {
    let b = binary.display().to_string();
    let words: Vec<&str> = match (kind, image) {
        (RuntimeKind::Bubblewrap, _) => vec![
            "--unshare-user",
            "--unshare-pid",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--",
            "true",
        ],
        (RuntimeKind::Apptainer, Some(image)) => {
            let image = image.to_str()?;
            return Some([b.as_str(), "--quiet", "exec", "--contain", image, "true"].map(String::from).to_vec());
        }
        (RuntimeKind::Apptainer, None) => return None,
    };
    Some(std::iter::once(b).chain(words.into_iter().map(String::from)).collect())
}

/// Runs `cmd`: its output when it succeeds, else why not.
fn attempt(cmd: &mut Command, limit: Duration) -> Outcome {
    match run_bounded(cmd, limit) {
        Ok(o) if o.status.success() => Outcome::ok(String::from_utf8_lossy(&o.stdout).trim()),
        Ok(o) => Outcome::failed(format!("{} ({})", last_words(&o), o.status)),
        Err(e) => Outcome::failed(format!("{e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bubblewraps_probe_runs_true_over_the_hosts_root_read_only() {
        let argv = start_command(RuntimeKind::Bubblewrap, Path::new("/usr/bin/bwrap"), None).unwrap();
        assert_eq!(argv[0], "/usr/bin/bwrap");
        assert!(argv.join(" ").contains("--ro-bind / /") && argv.contains(&"--unshare-user".to_string()));
        assert_eq!(argv.last().unwrap(), "true");
    }

    #[test]
    fn apptainers_probe_needs_an_image() {
        assert!(start_command(RuntimeKind::Apptainer, Path::new("/usr/bin/apptainer"), None).is_none());
        let argv = start_command(RuntimeKind::Apptainer, Path::new("/a"), Some(Path::new("/img.sif"))).unwrap();
        assert_eq!(argv, ["/a", "--quiet", "exec", "--contain", "/img.sif", "true"]);
    }

    #[test]
    fn a_failed_attempt_says_why_and_a_good_one_gives_its_output() {
        let o = attempt(Command::new("sh").args(["-c", "echo nope >&2; exit 3"]), Duration::from_secs(5));
        assert!(!o.ok && o.text.contains("nope") && o.text.contains('3'), "{o:?}");
        let o = attempt(Command::new("echo").arg("v1.2"), Duration::from_secs(5));
        assert_eq!(o, Outcome::ok("v1.2"));
    }
}
