//! Whether slurmd loads syndeo: the `plugstack` line (a line of Slurm's
//! plugin stack names syndeo.so, and that file exists) and `plugin-version`
//! (the file's `plugin_version` has the running Slurm's major.minor, which
//! Slurm requires of every plugin it loads).
use std::path::{Path, PathBuf};

use super::elf::major_minor;
use super::plugstack::{self, PluginLine, PLUGIN_FILE};
use super::slurm_conf::SlurmSettings;
use super::{Check, NodeFacts};

const RESTART: &str = "then restart slurmd (it reads the plugin stack at start)";

/// The `plugstack` and `plugin-version` lines.
pub fn checks(node: &dyn NodeFacts, slurm: &SlurmSettings) -> Vec<Check> {
    let dirs = slurm.plugin_dirs();
    let (listed, file) = listed(node, slurm, &dirs);
    // Unlisted or missing, the version is still read where the package puts it.
    let file = file.or_else(|| plugstack::resolve(node, Path::new(PLUGIN_FILE), &dirs));
    vec![listed, version(node, file.as_deref(), &dirs)]
}

fn listed(node: &dyn NodeFacts, slurm: &SlurmSettings, dirs: &[PathBuf]) -> (Check, Option<PathBuf>) {
    const NAME: &str = "plugstack";
    let stack = slurm.plugstack();
    let found = match plugstack::find(node, &stack) {
        Ok(f) => f,
        Err(e) => {
            let fix = format!(
                "create {} with `include {}/plugstack.conf.d/*.conf` (syndeo's package adds its line there), {RESTART}",
                stack.display(),
                slurm.conf_dir.display()
            );
            return (Check::fail(NAME, format!("{e}: slurmd loads no SPANK plugin"), fix), None);
        }
    };
    let Some(line) = found.line else {
        let read: Vec<String> = found.files.iter().map(|f| f.display().to_string()).collect();
        let detail = format!("no line loads {PLUGIN_FILE} in {}", read.join(", "));
        let fix = format!(
            "add `include {}/plugstack.conf.d/*.conf` to {} (syndeo's package installs plugstack.conf.d/syndeo.conf), \
             {RESTART}",
            slurm.conf_dir.display(),
            stack.display()
        );
        return (Check::fail(NAME, detail, fix), None);
    };
    let at = format!("{}:{}", line.file.display(), line.line);
    match plugstack::resolve(node, &line.path, dirs) {
        Some(file) => (Check::ok(NAME, describe(&line, &at, &file)), Some(file)),
        None => {
            let detail = format!("{at} names {}, which is not there (PluginDir: {})", line.path.display(), join(dirs));
            (Check::fail(NAME, detail, format!("reinstall syndeo's package built for this Slurm, {RESTART}")), None)
        }
    }
}

fn describe(line: &PluginLine, at: &str, file: &Path) -> String {
    let kind = if line.required { "required" } else { "optional: slurmd starts even when it fails to load" };
    format!("{at} loads {} ({kind})", file.display())
}

fn version(node: &dyn NodeFacts, file: Option<&Path>, dirs: &[PathBuf]) -> Check {
    const NAME: &str = "plugin-version";
    let Some(file) = file else {
        let detail = format!("no {PLUGIN_FILE} in PluginDir ({})", join(dirs));
        return Check::fail(NAME, detail, "install syndeo's package built for this node's Slurm release");
    };
    let built = match node.plugin_version(file) {
        Ok(v) => major_minor(v),
        Err(e) => {
            let detail = format!("cannot read which Slurm {} is built for: {e:#}", file.display());
            return Check::fail(NAME, detail, "reinstall syndeo's package built for this node's Slurm release");
        }
    };
    let built_text = format!("{}.{:02}", built.0, built.1);
    let running = match node.slurm_version() {
        Ok(v) => v,
        Err(e) => {
            let detail = format!(
                "{} is built for Slurm {built_text}; this node's Slurm version is unknown: {e:#}",
                file.display()
            );
            return Check::warn(NAME, detail, "check that slurmd -V names the same release");
        }
    };
    match parse_release(&running) {
        Some(r) if r == built => {
            Check::ok(NAME, format!("{} is built for Slurm {built_text}, this node runs {running}", file.display()))
        }
        Some(_) => Check::fail(
            NAME,
            format!("{} is built for Slurm {built_text}, this node runs {running}: slurmd refuses it", file.display()),
            format!(
                "install syndeo's package built for Slurm {running} (packaging/build against its headers), {RESTART}"
            ),
        ),
        None => Check::warn(
            NAME,
            format!(
                "{} is built for Slurm {built_text}; cannot read this node's version from {running:?}",
                file.display()
            ),
            "check that slurmd -V names the same release",
        ),
    }
}

/// (major, minor) of "22.05.8", "slurm 24.11.1" or "slurm-wlm 22.05.8".
pub fn parse_release(text: &str) -> Option<(u32, u32)> {
    let word = text.split_whitespace().last()?;
    let mut parts = word.split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn join(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::super::Status;
    use super::*;

    fn run(node: &FakeNode) -> (Check, Check) {
        let mut c = checks(node, &SlurmSettings::read(node));
        let v = c.pop().unwrap();
        (c.pop().unwrap(), v)
    }

    #[test]
    fn a_listed_plugin_built_for_the_running_release_is_ok() {
        let (listed, version) = run(&FakeNode::healthy());
        assert_eq!(listed.status, Status::Ok, "{listed:?}");
        assert!(listed.detail.contains("plugstack.conf.d/syndeo.conf:2") && listed.detail.contains("required"));
        assert_eq!(version.status, Status::Ok, "{version:?}");
        assert!(version.detail.contains("22.05") && version.detail.contains("22.05.8"), "{version:?}");
    }

    #[test]
    fn a_plugin_no_line_loads_fails_with_the_include_to_add() {
        let mut node = FakeNode::healthy();
        node.file("/etc/slurm/plugstack.conf", "# nothing\n");
        let (listed, version) = run(&node);
        assert_eq!(listed.status, Status::Fail);
        assert!(listed.fix.as_deref().unwrap().contains("include /etc/slurm/plugstack.conf.d/*.conf"));
        assert_eq!(version.status, Status::Ok, "the installed file is still checked: {version:?}");
    }

    #[test]
    fn a_missing_plugstack_file_or_plugin_file_fails() {
        let mut node = FakeNode::healthy();
        node.files.remove(Path::new("/etc/slurm/plugstack.conf"));
        assert_eq!(run(&node).0.status, Status::Fail);
        let mut node = FakeNode::healthy();
        node.stats.remove(Path::new("/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so"));
        let (listed, version) = run(&node);
        assert!(listed.status == Status::Fail && listed.detail.contains("not there"), "{listed:?}");
        assert_eq!(version.status, Status::Fail);
    }

    #[test]
    fn an_optional_line_is_ok_and_says_what_optional_means() {
        let mut node = FakeNode::healthy();
        node.file("/etc/slurm/plugstack.conf.d/syndeo.conf", "optional syndeo.so\n");
        let (listed, _) = run(&node);
        assert!(listed.status == Status::Ok && listed.detail.contains("optional"), "{listed:?}");
    }

    #[test]
    fn a_plugin_built_for_another_release_fails_naming_both() {
        let mut node = FakeNode::healthy();
        node.slurm_version = Ok("24.11.1".into());
        let (_, version) = run(&node);
        assert_eq!(version.status, Status::Fail);
        assert!(version.detail.contains("22.05") && version.detail.contains("24.11.1"), "{version:?}");
        assert!(version.fix.as_deref().unwrap().contains("24.11.1"));
    }

    #[test]
    fn an_unknown_running_version_warns_and_an_unreadable_plugin_fails() {
        let mut node = FakeNode::healthy();
        node.slurm_version = Err("no slurmd".into());
        assert_eq!(run(&node).1.status, Status::Warn);
        let mut node = FakeNode::healthy();
        node.plugin_versions.clear();
        assert_eq!(run(&node).1.status, Status::Fail);
    }

    #[test]
    fn releases_are_read_from_slurms_version_lines() {
        assert_eq!(parse_release("slurm 22.05.8"), Some((22, 5)));
        assert_eq!(parse_release("slurm-wlm 24.11.1"), Some((24, 11)));
        assert_eq!(parse_release("26.05.0-0rc1"), Some((26, 5)));
        assert_eq!(parse_release("garbage"), None);
    }
}
