//! The deb installed for real with dpkg in each Debian root of a Slurm
//! release (24.11 trixie, 26.05 sid), as an admin would: install, upgrade
//! over an edited config, remove, purge; and a deb of another Slurm release
//! refused. Each install goes into a throwaway overlay over the cached root.
//! No minicluster: `cargo test -p syndeo-tests --test package_deb -- --ignored`.
use std::path::Path;

use syndeo_tests::packages::*;
use syndeo_tests::*;

const TOML: &str = "/etc/syndeo/syndeo.toml";
const PLUGSTACK: &str = "/etc/slurm/plugstack.conf.d/syndeo.conf";
const KEY: &str = "/etc/syndeo/site.key";
const AGENT: &str = "/usr/libexec/syndeo/syndeo-agent";
const EDIT: &str = "# edited by the site";

fn status(root: &ScratchRoot) -> String {
    let o = root.run(&["dpkg-query", "-W", "-f", "${Status} ${Version}", "syndeo"]);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A throwaway root over release `rel`'s pristine copy, without what a
/// minicluster's dev install had put in the root before that copy was made
/// (a root cached before pristine copies existed): as a fresh node.
fn fresh_root(rel: &str, binds: &[&str]) -> ScratchRoot {
    let root = ScratchRoot::over(&pristine_root(rel), binds);
    root.ok(&["dpkg", "--purge", "syndeo"]);
    root.ok(&[
        "rm",
        "-rf",
        "/etc/syndeo",
        PLUGSTACK,
        "/usr/libexec/syndeo",
        "/usr/bin/syndeo",
        "/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so",
    ]);
    root
}

fn lifecycle_in(rel: &str, etc: &Path) {
    let old = build_packages("x86_64", rel, None, None);
    let new = build_packages("x86_64", rel, Some("0.1.1"), Some(etc));
    let root = fresh_root(rel, &[&dir_of(&old.deb), &dir_of(&new.deb)]);

    let out = root.ok(&["dpkg", "-i", &old.deb]);
    assert!(status(&root).starts_with("install ok installed 0.1.0-1+slurm"), "{rel}: {}\n{out}", status(&root));
    assert!(root.exists("/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so"), "{rel}: no plugin");
    assert_eq!(root.stat("%a %U", AGENT), "711 root", "{rel}");
    assert_eq!(root.stat("%a %U", KEY), "600 root", "{rel}: the site key made at install");
    let verify = root.ok(&["dpkg", "--verify", "syndeo"]);
    assert!(verify.trim().is_empty(), "{rel}: dpkg --verify after install: {verify}");
    let key = root.read(KEY).unwrap();

    // An admin's edit survives the upgrade; the new default lands beside it.
    root.ok(&["sh", "-c", &format!("echo '{EDIT}' >> {TOML}")]);
    root.ok(&["dpkg", "-i", "--force-confdef", "--force-confold", &new.deb]);
    assert!(status(&root).starts_with("install ok installed 0.1.1-1+slurm"), "{rel}: {}", status(&root));
    assert!(root.read(TOML).unwrap().contains(EDIT), "{rel}: the edited config was replaced");
    let dist = root.read(&format!("{TOML}.dpkg-dist")).unwrap_or_default();
    assert!(dist.contains(CHANGED) && !dist.contains(EDIT), "{rel}: the new default is not in .dpkg-dist: {dist}");
    assert_eq!(root.read(PLUGSTACK), Some(std::fs::read_to_string(etc.join("plugstack.conf.d/syndeo.conf")).unwrap()));
    assert_eq!(root.read(KEY).as_deref(), Some(key.as_str()), "{rel}: the upgrade changed the site key");
    let verify = root.ok(&["dpkg", "--verify", "syndeo"]);
    assert!(verify.lines().all(|l| l.ends_with(TOML)), "{rel}: dpkg --verify after the upgrade: {verify}");

    // remove: the programs go, the configuration and the key stay.
    root.ok(&["dpkg", "-r", "syndeo"]);
    assert!(status(&root).starts_with("deinstall ok config-files"), "{rel}: {}", status(&root));
    assert!(!root.exists(AGENT) && !root.exists("/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so"), "{rel}");
    assert!(root.read(TOML).unwrap().contains(EDIT), "{rel}: remove dropped the edited config");
    assert!(!root.exists(PLUGSTACK), "{rel}: after remove, slurmd would still load the removed plugin");
    assert_eq!(root.read(KEY).as_deref(), Some(key.as_str()), "{rel}: remove changed the site key");

    // reinstall after remove: the plugstack line the admin had is back.
    let kept = root.read(&format!("{PLUGSTACK}.syndeo-removed"));
    assert!(kept.is_some(), "{rel}: remove did not keep the plugstack line aside");
    root.ok(&["dpkg", "-i", "--force-confdef", "--force-confold", &new.deb]);
    assert_eq!(root.read(PLUGSTACK), kept, "{rel}: the reinstall did not put the plugstack line back");
    let verify = root.ok(&["dpkg", "--verify", "syndeo"]);
    assert!(verify.lines().all(|l| l.ends_with(TOML)), "{rel}: dpkg --verify after the reinstall: {verify}");
    root.ok(&["dpkg", "-r", "syndeo"]);

    // purge: nothing of syndeo's stays in /etc.
    root.ok(&["dpkg", "-P", "syndeo"]);
    assert!(status(&root).is_empty() || status(&root).starts_with("unknown"), "{rel}: {}", status(&root));
    for gone in [TOML, KEY, PLUGSTACK, &format!("{PLUGSTACK}.syndeo-removed"), "/etc/syndeo"] {
        assert!(!root.exists(gone), "{rel}: {gone} is left after purge");
    }
}

#[test]
#[ignore = "root, minutes: builds the debs and the 24.11 and 26.05 roots (tests/run --packages)"]
fn the_deb_installs_upgrades_keeping_an_edited_config_removes_and_purges_in_each_debian_root() {
    let etc = changed_etc();
    for rel in ["24.11", "26.05"] {
        lifecycle_in(rel, &etc);
    }
    std::fs::remove_dir_all(&etc).unwrap();
}

#[test]
#[ignore = "root, minutes: builds the 22.05 deb and the 24.11 root (tests/run --packages)"]
fn a_deb_for_another_slurm_release_is_refused_by_dpkg_naming_both_releases() {
    let deb = build_packages("x86_64", "22.05", None, None).deb;
    let root = fresh_root("24.11", &[&dir_of(&deb)]);
    let o = root.run(&["dpkg", "-i", &deb]);
    let out = text(&o);
    assert!(!o.status.success(), "dpkg installed a 22.05 package on Slurm 24.11: {out}");
    assert!(out.contains("slurm22.05") && out.contains("24.11"), "the refusal names both releases: {out}");
    // Refused before unpacking: neither the plugin nor its plugstack line.
    assert!(!root.exists(PLUGSTACK) && !root.exists("/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so"), "{out}");
}

#[test]
#[ignore = "root: the 24.11 root and its pristine copy (tests/run --packages)"]
fn a_file_put_into_a_releases_root_during_a_package_test_does_not_show_in_its_throwaway_root() {
    // A minicluster of 24.11 beside the package tests installs syndeo into
    // the release's root: on a fresh machine, its syndeo.toml appeared in the
    // deb test's root between two of its commands, and dpkg asked about it.
    let root = fresh_root("24.11", &[]);
    let probe = format!("/etc/syndeo-probe-{}", std::process::id());
    assert!(!root.exists(&probe), "{probe} is already in the throwaway root");
    let in_release_root = debian_root("24.11").join(probe.trim_start_matches('/'));
    std::fs::write(&in_release_root, "as a minicluster's install\n").unwrap();
    let seen = root.exists(&probe);
    std::fs::remove_file(&in_release_root).unwrap();
    assert!(!seen, "{probe}, put into the 24.11 root, shows in a package test's throwaway root");
}
