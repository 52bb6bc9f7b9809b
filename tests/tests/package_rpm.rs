//! The RPM installed for real: `rpm -i` (scriptlets run) into a Debian 11
//! root with Debian's rpm, `rpm -V` clean, an upgrade over an edited config,
//! an erase, and a reinstall, as an admin expects; what it requires, read
//! from its headers; one of another Slurm release refused.
//!
//! The root's rpm database knows none of the root's Debian packages, so two
//! stub RPMs stand in for them (no --nodeps anywhere): `slurm` of a chosen
//! version, and `syndeo-test-os`, which provides what syndeo's RPM requires
//! beside Slurm (glibc's libraries, /bin/sh), as a RHEL node's packages do.
//! No minicluster: `cargo test -p syndeo-tests --test package_rpm -- --ignored`.
use std::path::Path;

use syndeo_tests::packages::*;
use syndeo_tests::*;

const TOML: &str = "/etc/syndeo/syndeo.toml";
const PLUGSTACK: &str = "/etc/slurm/plugstack.conf.d/syndeo.conf";
const KEY: &str = "/etc/syndeo/site.key";
const AGENT: &str = "/usr/libexec/syndeo/syndeo-agent";
const PLUGIN: &str = "/usr/lib64/slurm/syndeo.so";
const EDIT: &str = "# edited by the site";

fn requires(rpm: &str) -> Vec<String> {
    let o = run(&["rpm", "-qp", "--requires", rpm]);
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).lines().map(|l| l.trim().to_string()).collect()
}

/// Builds a stub RPM (noarch, no files) into `dir`; its path.
fn stub_rpm(dir: &Path, name: &str, version: &str, provides: &[String]) -> String {
    let spec = dir.join(format!("{name}.spec"));
    let provides: String = provides.iter().map(|p| format!("Provides: {p}\n")).collect();
    std::fs::write(
        &spec,
        format!(
            "Name: {name}\nVersion: {version}\nRelease: 0.stub\nSummary: stand-in for the test root\n\
             License: none\nBuildArch: noarch\n{provides}\n%description\nstand-in\n\n%files\n"
        ),
    )
    .unwrap();
    let top = dir.join(format!("top-{name}"));
    let o = run(&[
        "rpmbuild",
        "-bb",
        "--quiet",
        "--define",
        &format!("_topdir {}", top.display()),
        "--define",
        &format!("_rpmdir {}", dir.display()),
        spec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "rpmbuild {name}: {}", text(&o));
    dir.join(format!("noarch/{name}-{version}-0.stub.noarch.rpm")).to_str().unwrap().to_string()
}

/// The stubs for a node whose Slurm is `slurm_version`: (the os, slurm).
fn stubs(dir: &Path, syndeo_rpm: &str, slurm_version: &str) -> (String, String) {
    let os: Vec<String> = requires(syndeo_rpm)
        .into_iter()
        .filter(|r| !r.starts_with("slurm") && !r.starts_with("rpmlib(") && !r.starts_with("config(syndeo)"))
        .collect();
    (stub_rpm(dir, "syndeo-test-os", "1", &os), stub_rpm(dir, "slurm", slurm_version, &[]))
}

/// The Debian 11 root with rpm, an empty rpm database, and the stubs installed.
fn rpm_root(binds: &[&str], stubs: &(String, String)) -> ScratchRoot {
    let root = ScratchRoot::over(&pristine_root("bullseye"), binds);
    root.ok(&["rpm", "--initdb"]);
    root.ok(&["rpm", "-i", &stubs.0, &stubs.1]);
    root
}

#[test]
#[ignore = "root, minutes: builds the x86_64 RPM of each Slurm release (tests/run --packages)"]
fn each_release_s_rpm_requires_slurm_of_that_major_minor_and_from_the_os_only_glibc_up_to_2_28() {
    for (rel, next) in [("22.05", "22.06"), ("24.11", "25.02"), ("26.05", "26.06")] {
        let rpm = build_packages("x86_64", rel, None, None).rpm;
        let reqs = requires(&rpm);
        assert!(
            reqs.contains(&format!("slurm >= {rel}")) && reqs.contains(&format!("slurm < {next}")),
            "{rel}: {reqs:?}"
        );
        let conflicts = run(&["rpm", "-qp", "--conflicts", &rpm]);
        let conflicts = String::from_utf8_lossy(&conflicts.stdout).to_string();
        assert!(
            conflicts.contains("(slurm >= 17.02 with slurm < 17.03)")
                && !conflicts.contains(&format!("(slurm >= {rel} with")),
            "{rel}: the conflicts name every other series, not its own: {conflicts}"
        );
        for r in &reqs {
            let os = ["/bin/sh", "rtld(GNU_HASH)", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0"]
                .iter()
                .any(|p| r.starts_with(p))
                || r.starts_with("ld-linux-x86-64.so.2")
                || r.starts_with("libgcc_s.so.1");
            let own = r.starts_with("slurm ") || r.starts_with("rpmlib(") || r.starts_with("config(syndeo)");
            assert!(os || own, "{rel}: unexpected requirement {r}");
            if let Some(v) = r.split("(GLIBC_").nth(1) {
                let v: Vec<u32> = v.split(')').next().unwrap().split('.').map(|x| x.parse().unwrap()).collect();
                assert!((v[0], v.get(1).copied().unwrap_or(0)) <= (2, 28), "{rel}: {r} is above the 2.28 floor");
            }
        }
    }
}

#[test]
#[ignore = "root, minutes: builds two RPMs and a Debian 11 root with rpm (tests/run --packages)"]
fn the_rpm_installs_with_its_scriptlets_verifies_clean_upgrades_keeping_an_edited_config_and_erases_keeping_the_key() {
    let etc = changed_etc();
    let old = build_packages("x86_64", "22.05", None, None).rpm;
    let new = build_packages("x86_64", "22.05", Some("0.1.1"), Some(&etc)).rpm;
    let stub_dir = scratch_dir("rpm-stubs");
    let stubs = stubs(&stub_dir, &old, "22.05.8");
    let root = rpm_root(&[&dir_of(&old), &dir_of(&new), stub_dir.to_str().unwrap()], &stubs);

    let out = root.ok(&["rpm", "-i", &old]);
    assert!(out.contains("syndeo: copy /etc/syndeo/site.key"), "%post did not run: {out}");
    assert!(root.exists(PLUGIN) && root.exists("/usr/bin/syndeo"), "files not installed: {out}");
    assert_eq!(root.stat("%a %U", AGENT), "711 root");
    assert_eq!(root.stat("%a %U", KEY), "600 root", "the site key %post makes");
    let verify = root.ok(&["rpm", "-V", "syndeo"]);
    assert!(verify.trim().is_empty(), "rpm -V after install: {verify}");
    let key = root.read(KEY).unwrap();

    // An admin's edit survives the upgrade; the new default lands as .rpmnew.
    root.ok(&["sh", "-c", &format!("echo '{EDIT}' >> {TOML}")]);
    root.ok(&["rpm", "-U", &new]);
    assert!(root.ok(&["rpm", "-q", "syndeo"]).starts_with("syndeo-0.1.1-1.slurm22.05"), "not upgraded");
    assert!(root.read(TOML).unwrap().contains(EDIT), "the upgrade replaced the edited config");
    let rpmnew = root.read(&format!("{TOML}.rpmnew")).unwrap_or_default();
    assert!(rpmnew.contains(CHANGED) && !rpmnew.contains(EDIT), "no .rpmnew with the new default: {rpmnew}");
    assert!(!root.exists(&format!("{PLUGSTACK}.rpmnew")), "an unedited config got an .rpmnew");
    assert_eq!(root.read(KEY).as_deref(), Some(key.as_str()), "the upgrade changed the site key");
    let verify = root.run(&["rpm", "-V", "syndeo"]);
    let listed = String::from_utf8_lossy(&verify.stdout).into_owned();
    assert!(
        listed.lines().count() == 1 && listed.contains(&format!(" c {TOML}")),
        "rpm -V after the upgrade: {listed}"
    );

    // erase: edited configs kept as .rpmsave, so slurmd loads no plugin
    // that is gone; the site key stays (a reinstall must not change it).
    root.ok(&["sh", "-c", &format!("sed -i 's/^required syndeo.so/required syndeo.so wait_timeout=600/' {PLUGSTACK}")]);
    root.ok(&["rpm", "-e", "syndeo"]);
    assert!(!root.exists(AGENT) && !root.exists(PLUGIN), "erase left the programs");
    assert!(!root.exists(PLUGSTACK), "erase left a plugstack line for a plugin that is gone");
    assert!(root.read(&format!("{PLUGSTACK}.rpmsave")).unwrap_or_default().contains("wait_timeout=600"));
    assert!(root.read(&format!("{TOML}.rpmsave")).unwrap_or_default().contains(EDIT), "no .rpmsave of the edit");
    assert_eq!(root.read(KEY).as_deref(), Some(key.as_str()), "erase removed or changed the site key");
    root.ok(&["rpm", "-i", &new]);
    assert_eq!(root.read(KEY).as_deref(), Some(key.as_str()), "a reinstall changed the site key");

    drop(root);
    std::fs::remove_dir_all(&stub_dir).unwrap();
    std::fs::remove_dir_all(&etc).unwrap();
}

#[test]
#[ignore = "root, minutes: builds the 22.05 RPM and a Debian 11 root with rpm (tests/run --packages)"]
fn an_rpm_for_another_slurm_release_is_refused_by_rpm_naming_the_slurm_it_needs_and_the_one_installed() {
    let rpm = build_packages("x86_64", "22.05", None, None).rpm;
    let stub_dir = scratch_dir("rpm-stubs");
    let stubs = stubs(&stub_dir, &rpm, "24.11.5");
    let root = rpm_root(&[&dir_of(&rpm), stub_dir.to_str().unwrap()], &stubs);
    let o = root.run(&["rpm", "-i", &rpm]);
    let out = text(&o);
    assert!(!o.status.success(), "rpm installed a 22.05 package on Slurm 24.11: {out}");
    // rpm names the Slurm the package needs and, through the conflict with
    // the installed series (packaging/build), the Slurm installed.
    assert!(
        out.contains("slurm < 22.06 is needed by syndeo-0.1.0-1.slurm22.05")
            && out.contains("(slurm >= 24.11 with slurm < 25.02) conflicts with syndeo-0.1.0-1.slurm22.05"),
        "the refusal names both releases: {out}"
    );
    assert!(!root.exists(PLUGIN) && !root.exists(PLUGSTACK), "a refused install left files: {out}");
    drop(root);
    std::fs::remove_dir_all(&stub_dir).unwrap();
}
