//! `syndeo-agent check`: an admin's read-only look at one node, run as root,
//! before a user's job finds the problem. One line per check, `OK`, `WARN`
//! or `FAIL`, with the fix in words; `--json` prints the same as one JSON
//! array. Any FAIL makes the command exit 1.
//!
//! Every check is a pure decision over [`NodeFacts`]: the reads of the OS and
//! of Slurm live behind that trait ([`real::RealNode`] on a node, a fake in
//! the unit tests), one module per concern:
//! - [`plugin`] (with [`plugstack`] and [`slurm_conf`]): slurmd loads
//!   syndeo.so, built for the running Slurm;
//! - [`slurm`]: `PrologFlags` and Slurm's cgroup plugins;
//! - [`sitekey`]: the site key and its fingerprint;
//! - [`runtime`] (with [`probe`]): the container runtime, its version, a
//!   container started as an unprivileged user;
//! - [`userns`], [`fuse`], [`ports`], [`bases`], [`preload`]: the kernel's
//!   settings and the files the jobs need.
//!
//! Nothing here changes the node: the only thing written is the probes'
//! private temp dir, removed before the command ends.
mod bases;
mod command;
mod elf;
mod facts;
mod fuse;
mod plugin;
mod plugstack;
mod ports;
mod preload;
pub mod probe;
mod real;
mod report;
mod runtime;
mod sitekey;
mod slurm;
mod slurm_conf;
mod userns;

#[cfg(test)]
mod fake;

use std::path::Path;

use anyhow::{bail, Result};
use serde::Serialize;

pub use facts::{FileInfo, FileKind, NodeFacts, ProbeRequest, ProbeUser};

use crate::cli::CheckArgs;
use crate::config::Config;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

/// One line of the report: what was checked, how it stands, what was seen,
/// and for a WARN or FAIL what to do about it.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check { name, status: Status::Ok, detail: detail.into(), fix: None }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Warn, detail: detail.into(), fix: Some(fix.into()) }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name, status: Status::Fail, detail: detail.into(), fix: Some(fix.into()) }
    }
}

/// `syndeo-agent check`: prints the report; an error (exit 1) when any check failed.
pub fn run(a: &CheckArgs) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("syndeo-agent check reads root's files and starts probes as another user: run it as root");
    }
    // The report is stdout; what goes wrong on the way (SYNDEO_LOG=debug: every command run) is stderr.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("SYNDEO_LOG").unwrap_or_else(|_| "warn".into()))
        .try_init();
    let user = ProbeUser::lookup(&a.as_user).map_err(|e| format!("{e:#}"));
    let node = real::RealNode::new();
    let checks = all(&node, &a.config, user.as_ref());
    let out = if a.json { report::json(&checks)? } else { report::text(&checks) };
    print!("{out}");
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    if failed > 0 {
        bail!("{failed} of {} checks failed", checks.len());
    }
    Ok(())
}

/// Every check, in the report's order. Without a valid syndeo.toml, the
/// checks that need it are left out (its own line says why); without the
/// probes' user, one `probe-user` line stands for the checks that need it.
pub fn all(node: &dyn NodeFacts, config_path: &Path, user: Result<&ProbeUser, &String>) -> Vec<Check> {
    let (config_check, config) = config_check(node, config_path);
    let slurm = slurm_conf::SlurmSettings::read(node);
    let mut checks = vec![config_check];
    checks.extend(plugin::checks(node, &slurm));
    checks.push(slurm::prolog_flags(&slurm));
    checks.push(slurm::cgroup_plugins(&slurm));
    if let Some(c) = &config {
        checks.push(sitekey::check(node, &c.site_key));
        match user {
            Ok(user) => {
                checks.extend(runtime::checks(node, c, user));
                checks.push(userns::check(node, user));
            }
            Err(e) => checks.push(Check::fail(
                "probe-user",
                format!("{e}: the runtime and user namespaces are not checked"),
                "name an unprivileged user of this node with --as-user",
            )),
        }
        checks.push(fuse::check(node, c.runtime));
        checks.push(ports::ray_ports(node, c));
        checks.push(ports::mesh_ports(node, c));
        checks.push(temp_base(node, &slurm, c));
        checks.push(bases::check(node, "shm-base", &c.shm_base));
    }
    checks.push(preload::check(node));
    checks
}

/// `temp_base` where the prolog will use it: under Slurm's per-job /tmp
/// (job_container/tmpfs, namespace/tmpfs) the default moves out of /tmp, and
/// one the admin set there fails every syndeo job (`job_container.rs`).
fn temp_base(node: &dyn NodeFacts, slurm: &slurm_conf::SlurmSettings, c: &Config) -> Check {
    let plugin = ["NamespaceType", "JobContainerType"].iter().find_map(|k| slurm.get(k).map(|v| format!("{k}={v}")));
    let jc = node.read_text(&slurm.conf_dir.join("job_container.conf")).unwrap_or_default();
    let private = crate::job_container::private_dirs(plugin.as_deref().unwrap_or(""), &jc);
    match crate::job_container::temp_base(c, &private) {
        Ok(base) => bases::check(node, "temp-base", &base),
        Err(e) => {
            let dirs: Vec<String> = private.iter().map(|p| p.display().to_string()).collect();
            let fallback = crate::job_container::FALLBACK_TEMP_BASE;
            let fix =
                format!("set temp_base in syndeo.toml outside {}, e.g. temp_base = \"{fallback}\"", dirs.join(", "));
            Check::fail("temp-base", e, fix)
        }
    }
}

/// The site configuration: root's, and valid. Returns it when it loads.
fn config_check(node: &dyn NodeFacts, path: &Path) -> (Check, Option<Config>) {
    const NAME: &str = "config";
    let text = match node.read_text(path) {
        Ok(t) => t,
        Err(e) => {
            let detail = format!("cannot read {}: {e}; syndeo jobs fail on this node", path.display());
            let fix = "install syndeo's package (it ships /etc/syndeo/syndeo.toml) or restore the file";
            return (Check::fail(NAME, format!("{detail} (the checks that need it are skipped)"), fix), None);
        }
    };
    let config = match Config::parse(&text, path) {
        Ok(c) => c,
        Err(e) => {
            let detail = format!("{e}; syndeo jobs fail on this node (the checks that need it are skipped)");
            return (Check::fail(NAME, detail, "correct the file; see syndeo.toml(5)"), None);
        }
    };
    let owner_fix = format!("chown root:root {0}; chmod 0644 {0}", path.display());
    let check = match node.lstat(path) {
        Ok(m) if m.uid != 0 || m.mode & 0o022 != 0 => Check::fail(
            NAME,
            format!(
                "{} is owner {} mode {:04o}: someone other than root can change which runtime and ports root sets up",
                path.display(),
                m.uid,
                m.mode & 0o7777
            ),
            owner_fix,
        ),
        _ => Check::ok(NAME, format!("{} (runtime {})", path.display(), runtime::kind_name(config.runtime))),
    };
    (check, Some(config))
}

#[cfg(test)]
mod tests {
    use super::fake::FakeNode;
    use super::*;

    #[test]
    fn a_valid_root_owned_config_is_ok_and_names_the_runtime() {
        let node = FakeNode::healthy();
        let (c, config) = config_check(&node, Path::new("/etc/syndeo/syndeo.toml"));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("bubblewrap"), "{c:?}");
        assert!(config.is_some());
    }

    #[test]
    fn a_missing_or_invalid_config_fails_and_skips_the_checks_that_need_it() {
        let mut node = FakeNode::healthy();
        node.files.remove(Path::new("/etc/syndeo/syndeo.toml"));
        let (c, config) = config_check(&node, Path::new("/etc/syndeo/syndeo.toml"));
        assert_eq!(c.status, Status::Fail);
        assert!(config.is_none());
        node.file("/etc/syndeo/syndeo.toml", "runtme = \"bubblewrap\"\n");
        let (c, _) = config_check(&node, Path::new("/etc/syndeo/syndeo.toml"));
        assert!(c.status == Status::Fail && c.detail.contains("runtme"), "{c:?}");
        let checks = all(&node, Path::new("/etc/syndeo/syndeo.toml"), Ok(&FakeNode::nobody()));
        assert!(!checks.iter().any(|c| c.name == "site-key"), "{checks:?}");
    }

    #[test]
    fn a_config_others_can_write_fails() {
        let mut node = FakeNode::healthy();
        node.set_stat("/etc/syndeo/syndeo.toml", FileInfo::file(0, 0o666));
        let (c, _) = config_check(&node, Path::new("/etc/syndeo/syndeo.toml"));
        assert!(c.status == Status::Fail && c.fix.as_deref().unwrap().contains("chmod 0644"), "{c:?}");
    }

    #[test]
    fn without_the_probes_user_one_line_fails_and_the_other_checks_still_run() {
        let node = FakeNode::healthy();
        let why = "there is no user nobody on this node".to_string();
        let checks = all(&node, Path::new("/etc/syndeo/syndeo.toml"), Err(&why));
        let names: Vec<&str> = checks.iter().map(|c| c.name).collect();
        assert!(names.contains(&"probe-user") && !names.contains(&"runtime"), "{names:?}");
        assert!(names.contains(&"site-key") && names.contains(&"ray-ports"), "{names:?}");
        assert!(node.probes.borrow().is_empty());
    }

    #[test]
    fn on_a_healthy_node_every_check_is_ok() {
        let node = FakeNode::healthy();
        let checks = all(&node, Path::new("/etc/syndeo/syndeo.toml"), Ok(&FakeNode::nobody()));
        let bad: Vec<_> = checks.iter().filter(|c| c.status != Status::Ok).collect();
        assert!(bad.is_empty(), "{bad:#?}");
        assert!(checks.len() >= 15, "{checks:#?}");
    }
}
