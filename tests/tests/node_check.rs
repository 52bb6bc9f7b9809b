//! `syndeo-agent check` on the minicluster's nodes: on a healthy node every
//! line is OK; then each thing it checks is broken in turn, its FAIL or WARN
//! line seen, and the thing put back by a guard that restores it even when
//! the test fails: the site key's mode, the runtime's path, `ray_ports`,
//! /dev/fuse (Apptainer's nodes only), `PrologFlags` (slurm.conf and a
//! restart), and `user.max_user_namespaces`, which is the host's own (the
//! nodes share its user namespace): libtest runs a file's tests one at a
//! time in the order of their names (`tests/run` passes --test-threads=1),
//! so `user_namespaces_off_...` runs last.
//!
//! WARNs the minicluster cannot avoid: none with Slurm's cgroup plugins on
//! (`tests/run`'s default). Under `up --no-cgroups` it runs
//! `PrologFlags=Alloc` and no cgroup plugins on purpose, so `prolog-flags`
//! and `cgroup-plugins` WARN there.
use std::process::Output;

use syndeo_tests::*;

const AGENT: &str = "/usr/libexec/syndeo/syndeo-agent";
const NODE: &str = "node1";

/// One line of the report: `STATUS name: detail [Fix: ...]`.
#[derive(Debug, Clone)]
struct Line {
    status: String,
    name: String,
    rest: String,
}

fn parse(o: &Output) -> Vec<Line> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let (status, rest) = l.split_once(' ')?;
            let (name, rest) = rest.trim_start().split_once(": ")?;
            Some(Line { status: status.into(), name: name.into(), rest: rest.into() })
        })
        .collect()
}

/// `syndeo-agent check ARGS` as root inside `node`: its output and lines.
fn check_on(node: &str, args: &[&str]) -> (Output, Vec<Line>) {
    let mut argv = vec![AGENT, "check"];
    argv.extend_from_slice(args);
    let o = in_node(node, &argv);
    let lines = parse(&o);
    assert!(!lines.is_empty(), "check printed no line on {node}: {}", text(&o));
    (o, lines)
}

fn line<'a>(lines: &'a [Line], name: &str) -> &'a Line {
    lines.iter().find(|l| l.name == name).unwrap_or_else(|| panic!("no {name} line in {lines:#?}"))
}

/// Runs check on NODE and asserts `name`'s status; the line, for more checks.
fn expect(name: &str, status: &str) -> Line {
    let (o, lines) = check_on(NODE, &[]);
    let l = line(&lines, name).clone();
    assert_eq!(l.status, status, "{name}: {}", text(&o));
    let code = o.status.code();
    assert_eq!(code, Some(if lines.iter().any(|l| l.status == "FAIL") { 1 } else { 0 }), "{}", text(&o));
    l
}

/// Lines the minicluster's mode makes WARN on purpose (see the top).
fn expected_warnings() -> &'static [&'static str] {
    if cgroup_mode() {
        &[]
    } else {
        &["prolog-flags", "cgroup-plugins"]
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_healthy_node_passes_every_check_and_every_node_has_the_same_site_key() {
    let mut prints = vec![];
    for n in nodes() {
        let (o, lines) = check_on(&n, &[]);
        let bad: Vec<&Line> =
            lines.iter().filter(|l| l.status != "OK" && !expected_warnings().contains(&l.name.as_str())).collect();
        assert!(bad.is_empty(), "on {n}: {bad:#?}\n{}", text(&o));
        assert!(o.status.success(), "{}", text(&o));
        for name in [
            "plugstack",
            "plugin-version",
            "prolog-flags",
            "site-key",
            "runtime",
            "runtime-start",
            "user-namespaces",
            "ray-ports",
            "mesh-ports",
            "temp-base",
            "shm-base",
            "preload",
        ] {
            line(&lines, name);
        }
        let key = line(&lines, "site-key").rest.clone();
        prints.push(
            key.split("fingerprint ")
                .nth(1)
                .unwrap_or_default()
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert!(prints[0].len() == 16 && prints.iter().all(|p| *p == prints[0]), "fingerprints: {prints:?}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn check_json_is_one_array_of_name_status_detail_fix() {
    let o = in_node(NODE, &[AGENT, "check", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let checks = v.as_array().expect("an array");
    assert!(checks.len() >= 12, "{v:#}");
    for c in checks {
        assert!(c["name"].is_string() && c["detail"].is_string(), "{c}");
        assert!(["OK", "WARN", "FAIL"].contains(&c["status"].as_str().unwrap()), "{c}");
        assert_eq!(c["fix"].is_null(), c["status"] == "OK", "a fix for every WARN and FAIL only: {c}");
    }
}

/// Runs `argv` in NODE when dropped.
struct InNodeOnDrop(Vec<String>);

impl Drop for InNodeOnDrop {
    fn drop(&mut self) {
        let argv: Vec<&str> = self.0.iter().map(String::as_str).collect();
        let o = in_node(NODE, &argv);
        if !std::thread::panicking() {
            assert!(o.status.success(), "restoring with {argv:?}: {}", text(&o));
        }
    }
}

/// `chmod MODE PATH` in NODE, put back to `back` when the guard drops.
fn chmod_in_node(path: &str, mode: &str, back: &str) -> InNodeOnDrop {
    let guard = InNodeOnDrop(vec!["chmod".into(), back.into(), path.into()]);
    let o = in_node(NODE, &["chmod", mode, path]);
    assert!(o.status.success(), "chmod {mode} {path}: {}", text(&o));
    guard
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_site_key_others_can_read_fails_the_site_key_line_with_chmod() {
    let _key = chmod_in_node("/etc/syndeo/site.key", "0644", "0600");
    let l = expect("site-key", "FAIL");
    assert!(l.rest.contains("0644") && l.rest.contains("chmod 0600"), "{l:?}");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_runtime_path_pointing_nowhere_fails_the_runtime_line_naming_it() {
    let key = if runtime() == "apptainer" { "apptainer" } else { "bwrap" };
    let _gone = ConfigOverride::set(key, "\"/nonexistent/syndeo-runtime\"");
    let l = expect("runtime", "FAIL");
    assert!(l.rest.contains("/nonexistent/syndeo-runtime") && l.rest.contains(&format!("{key} = ")), "{l:?}");
    expect("runtime-start", "FAIL");
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn ray_ports_inside_the_ephemeral_range_fail_and_partly_inside_warn() {
    let inside = ConfigOverride::set("ray_ports", "\"40000-40100\"");
    let l = expect("ray-ports", "FAIL");
    assert!(l.rest.contains("32768-60999"), "the node's own range: {l:?}");
    drop(inside);
    let _partly = ConfigOverride::set("ray_ports", "\"32000-33000\"");
    expect("ray-ports", "WARN");
}

/// Apptainer's nodes have a /dev/fuse of their own (the minicluster binds a
/// 0666 one in each); on bubblewrap's, /dev/fuse is the host's, left alone,
/// and the line says FUSE is not needed.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn a_root_only_dev_fuse_warns_on_apptainer_nodes() {
    if runtime() != "apptainer" {
        let l = expect("dev-fuse", "OK");
        assert!(l.rest.contains("not needed"), "{l:?}");
        return;
    }
    let _fuse = chmod_in_node("/dev/fuse", "0600", "0666");
    let l = expect("dev-fuse", "WARN");
    assert!(l.rest.contains("0600") && l.rest.contains("chmod 0666"), "{l:?}");
}

/// With a `default_image`, Apptainer's line starts that image as a user of
/// the node (`--as-user`: the test images are readable by the test users).
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn apptainer_starts_the_default_image_as_the_given_user() {
    if runtime() != "apptainer" {
        return; // bubblewrap's start is in the healthy node's lines
    }
    let image = image();
    let _default = ConfigOverride::set("default_image", &format!("\"{image}\""));
    let (o, lines) = check_on(NODE, &["--as-user", user_a()]);
    let l = line(&lines, "runtime-start");
    assert!(l.status == "OK" && l.rest.contains(user_a()) && l.rest.contains(&image), "{}", text(&o));
}

/// slurm.conf as it was, written back (and the daemons restarted) when
/// dropped; `minicluster restart` re-reads slurm.conf, which only `up` writes.
struct SlurmConf {
    original: String,
}

fn slurm_conf_path() -> String {
    format!("{}/etc/slurm/slurm.conf", root_prefix())
}

fn restart() -> Output {
    run(&[minicluster().to_str().unwrap(), "restart"])
}

impl SlurmConf {
    fn keep() -> SlurmConf {
        SlurmConf { original: std::fs::read_to_string(slurm_conf_path()).unwrap() }
    }

    /// The original with `PrologFlags=flags` (None: no such line), read by restarted daemons.
    fn with_prolog_flags(&self, flags: Option<&str>) {
        let mut lines: Vec<String> =
            self.original.lines().filter(|l| !l.starts_with("PrologFlags=")).map(String::from).collect();
        if let Some(f) = flags {
            lines.push(format!("PrologFlags={f}"));
        }
        std::fs::write(slurm_conf_path(), lines.join("\n") + "\n").unwrap();
        let o = restart();
        assert!(o.status.success(), "minicluster restart: {}", text(&o));
    }
}

impl Drop for SlurmConf {
    fn drop(&mut self) {
        std::fs::write(slurm_conf_path(), &self.original).unwrap();
        let o = restart();
        if !std::thread::panicking() {
            assert!(o.status.success(), "minicluster restart: {}", text(&o));
        }
    }
}

#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn prolog_flags_with_alloc_alone_warn_and_without_alloc_fail() {
    let conf = SlurmConf::keep();
    conf.with_prolog_flags(Some("Alloc"));
    let l = expect("prolog-flags", "WARN");
    assert!(l.rest.contains("PrologFlags=Alloc") && l.rest.contains("PrologFlags=Contain"), "{l:?}");
    conf.with_prolog_flags(None);
    let l = expect("prolog-flags", "FAIL");
    assert!(l.rest.contains("PrologFlags=Contain"), "{l:?}");
}

/// Last of this file (by name): `user.max_user_namespaces` is the host's.
#[test]
#[ignore = "needs the minicluster (tests/run)"]
fn user_namespaces_off_fail_the_user_namespaces_line() {
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            std::fs::write("/proc/sys/user/max_user_namespaces", &self.0).unwrap();
        }
    }
    let original = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap();
    if let Err(e) = std::fs::write("/proc/sys/user/max_user_namespaces", original.trim()) {
        // A machine that runs the tests in a container may keep its sysctls
        // read-only even for root: the decision is unit-tested (check/).
        eprintln!("NOT SHOWN here: max_user_namespaces cannot be written on this machine ({e})");
        return;
    }
    let restore = Restore(original.trim().to_string());
    std::fs::write("/proc/sys/user/max_user_namespaces", "0").unwrap();
    let (o, lines) = check_on(NODE, &[]);
    drop(restore);
    let l = line(&lines, "user-namespaces");
    assert!(l.status == "FAIL" && l.rest.contains("max_user_namespaces"), "{}", text(&o));
    assert_eq!(o.status.code(), Some(1));
    if runtime() == "bubblewrap" {
        assert_eq!(line(&lines, "runtime-start").status, "FAIL", "{}", text(&o));
    }
}
