//! The configured container runtime: `runtime` (installed, root's alone, and
//! its version, asked as the unprivileged user) and `runtime-start` (that
//! user starts a container: bubblewrap over the host's own root, read-only;
//! Apptainer in the site's `default_image`, when there is one).
use std::path::PathBuf;

use super::facts::ProbeReport;
use super::{Check, FileKind, NodeFacts, ProbeRequest, ProbeUser};
use crate::config::{Config, RuntimeKind};

pub fn kind_name(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Apptainer => "apptainer",
        RuntimeKind::Bubblewrap => "bubblewrap",
    }
}

/// The runtime's program and the config key that names it.
fn binary(c: &Config) -> (PathBuf, &'static str) {
    match c.runtime {
        RuntimeKind::Apptainer => (c.apptainer.clone(), "apptainer"),
        RuntimeKind::Bubblewrap => (c.bwrap.clone(), "bwrap"),
    }
}

/// The `runtime` and `runtime-start` lines.
pub fn checks(node: &dyn NodeFacts, c: &Config, user: &ProbeUser) -> Vec<Check> {
    let (bin, key) = binary(c);
    let kind = kind_name(c.runtime);
    let b = bin.display();
    let install = format!("install {kind} on this node, or set `{key} = \"PATH\"` in syndeo.toml");
    let meta = match node.stat(&bin) {
        Ok(m) if m.kind == FileKind::File && m.mode & 0o111 != 0 => m,
        Ok(_) => return both_fail(format!("{b} ({key} in syndeo.toml) is not an executable file"), &install),
        Err(e) => return both_fail(format!("{kind} is not installed: {b} ({key} in syndeo.toml): {e}"), &install),
    };
    if !meta.roots_alone() {
        let detail = format!(
            "{b} is owner {} mode {:04o}: whoever can change it runs code in every user's job",
            meta.uid, meta.mode
        );
        return both_fail(detail, &format!("chown root:root {b}; chmod 0755 {b}"));
    }
    let image = match c.runtime {
        RuntimeKind::Apptainer => c.default_image.clone(),
        _ => None,
    };
    let req = ProbeRequest::Runtime { kind: c.runtime, binary: bin.clone(), image: image.clone() };
    let report = match node.probe(&req, user) {
        Ok(r) => r,
        Err(e) => return both_fail(format!("cannot run the probe as {}: {e:#}", user.name), "see the message"),
    };
    vec![version(&report, kind, &bin, user), start(&report, c.runtime, image, user)]
}

fn both_fail(detail: String, fix: &str) -> Vec<Check> {
    vec![
        Check::fail("runtime", detail, fix),
        Check::fail("runtime-start", "not tried: the runtime is unusable (see runtime)", fix),
    ]
}

fn version(report: &ProbeReport, kind: &str, bin: &std::path::Path, user: &ProbeUser) -> Check {
    match &report.version {
        Some(v) if v.ok => Check::ok("runtime", format!("{} ({})", v.text.trim(), bin.display())),
        Some(v) => Check::fail(
            "runtime",
            format!("`{} --version` as {} failed: {}", bin.display(), user.name, v.text),
            format!("reinstall {kind}"),
        ),
        None => {
            Check::fail("runtime", format!("`{} --version` was not run", bin.display()), format!("reinstall {kind}"))
        }
    }
}

fn start(report: &ProbeReport, kind: RuntimeKind, image: Option<PathBuf>, user: &ProbeUser) -> Check {
    const NAME: &str = "runtime-start";
    let fix = match kind {
        RuntimeKind::Bubblewrap => "allow unprivileged user namespaces (see user-namespaces); bwrap must not be setuid",
        RuntimeKind::Apptainer => {
            "allow unprivileged user namespaces (see user-namespaces); for SIF images /dev/fuse must be usable \
             (see dev-fuse); the default_image must be readable by every user"
        }
    };
    match (&report.start, image) {
        (Some(s), _) if s.ok => Check::ok(NAME, format!("a container started as {}: {}", user.name, s.text)),
        (Some(s), _) => Check::fail(NAME, format!("as {}: {}", user.name, s.text), fix),
        (None, None) if kind == RuntimeKind::Apptainer => Check::ok(
            NAME,
            "not tried: no default_image to start (user namespaces are checked below); set default_image to try one",
        ),
        (None, _) => Check::fail(NAME, "the probe did not try a start", fix),
    }
}

#[cfg(test)]
mod tests {
    use super::super::facts::Outcome;
    use super::super::fake::FakeNode;
    use super::super::{FileInfo, Status};
    use super::*;

    fn run(node: &FakeNode, c: &Config) -> (Check, Check) {
        let mut v = checks(node, c, &FakeNode::nobody());
        let s = v.pop().unwrap();
        (v.pop().unwrap(), s)
    }

    fn bwrap() -> Config {
        Config { runtime: RuntimeKind::Bubblewrap, ..Config::default() }
    }

    #[test]
    fn an_installed_runtime_that_starts_a_container_is_ok_with_its_version() {
        let node = FakeNode::healthy();
        let (v, s) = run(&node, &bwrap());
        assert!(v.status == Status::Ok && v.detail.contains("bubblewrap 0.8.0"), "{v:?}");
        assert!(s.status == Status::Ok && s.detail.contains("nobody"), "{s:?}");
        let asked = node.probes.borrow();
        assert!(matches!(&asked[0], ProbeRequest::Runtime { image: None, .. }), "{asked:?}");
    }

    #[test]
    fn a_runtime_path_pointing_nowhere_fails_naming_the_key() {
        let node = FakeNode::healthy();
        let c = Config { bwrap: "/nonexistent/bwrap".into(), ..bwrap() };
        let (v, s) = run(&node, &c);
        assert!(v.status == Status::Fail && v.detail.contains("/nonexistent/bwrap"), "{v:?}");
        assert!(v.fix.as_deref().unwrap().contains("bwrap = "));
        assert_eq!(s.status, Status::Fail);
        assert!(node.probes.borrow().is_empty(), "nothing is run");
    }

    #[test]
    fn a_runtime_others_can_replace_fails_and_is_not_run() {
        let mut node = FakeNode::healthy();
        node.set_stat("/usr/bin/bwrap", FileInfo::file(1000, 0o755));
        let (v, _) = run(&node, &bwrap());
        assert!(v.status == Status::Fail && v.fix.as_deref().unwrap().contains("chown root"), "{v:?}");
        assert!(node.probes.borrow().is_empty());
    }

    #[test]
    fn a_container_that_does_not_start_fails_with_the_runtimes_words() {
        let mut node = FakeNode::healthy();
        node.runtime_report.start = Some(Outcome::failed("bwrap: No permissions to creating new namespace"));
        let (v, s) = run(&node, &bwrap());
        assert_eq!(v.status, Status::Ok);
        assert!(s.status == Status::Fail && s.detail.contains("No permissions"), "{s:?}");
    }

    #[test]
    fn apptainer_without_a_default_image_only_checks_its_version() {
        let mut node = FakeNode::healthy();
        node.runtime_report =
            ProbeReport { version: Some(Outcome::ok("apptainer version 1.4.5")), ..Default::default() };
        let (v, s) = run(&node, &Config::default());
        assert!(v.status == Status::Ok && v.detail.contains("1.4.5"), "{v:?}");
        assert!(s.status == Status::Ok && s.detail.contains("not tried"), "{s:?}");
    }

    #[test]
    fn apptainer_with_a_default_image_starts_it() {
        let node = FakeNode::healthy();
        let c = Config { default_image: Some("/shared/ray.sif".into()), ..Config::default() };
        run(&node, &c);
        let asked = node.probes.borrow();
        assert!(
            matches!(&asked[0], ProbeRequest::Runtime { image: Some(i), .. } if i == &PathBuf::from("/shared/ray.sif")),
            "{asked:?}"
        );
    }

    #[test]
    fn a_failed_version_fails_the_runtime_line() {
        let mut node = FakeNode::healthy();
        node.runtime_report.version = Some(Outcome::failed("exit status: 127"));
        assert_eq!(run(&node, &bwrap()).0.status, Status::Fail);
    }
}
