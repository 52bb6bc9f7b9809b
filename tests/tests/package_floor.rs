//! The packages run where sites run Slurm: every ELF in the deb and the RPM,
//! x86_64 and aarch64, for each Slurm release, needs glibc 2.28 at most
//! (RHEL 8) and no library beyond glibc's and libgcc_s; the x86_64 agent
//! runs in Debian 11 (glibc 2.31) and the aarch64 one under qemu-user. No
//! minicluster: `cargo test -p syndeo-tests --test package_floor -- --ignored`
//! (root; builds the packages and the roots when missing).
use std::path::Path;

use syndeo_tests::packages::*;
use syndeo_tests::*;

const RELEASES: [&str; 3] = ["22.05", "24.11", "26.05"];
const FLOOR: (u32, u32) = (2, 28);
/// glibc's own libraries, and libgcc_s (unwinding).
const ALLOWED: [&str; 8] = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    "libgcc_s.so.1",
];

fn objdump(flag: &str, elf: &Path) -> String {
    let o = run(&["objdump", flag, elf.to_str().unwrap()]);
    assert!(o.status.success(), "objdump {flag} {}: {}", elf.display(), text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The highest GLIBC_x.y among the symbol versions `objdump -T` lists.
fn highest_glibc(elf: &Path) -> (u32, u32) {
    let dump = objdump("-T", elf);
    let mut best = (0, 0);
    for word in dump.split(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        let Some(v) = word.strip_prefix("GLIBC_") else { continue };
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        best = best.max(version);
    }
    assert!(best > (2, 0), "{}: no GLIBC_ version in objdump -T", elf.display());
    best
}

fn needed(elf: &Path) -> Vec<String> {
    objdump("-p", elf).lines().filter_map(|l| l.trim().strip_prefix("NEEDED").map(|n| n.trim().to_string())).collect()
}

/// ELF e_machine: 62 x86_64, 183 aarch64.
fn machine(elf: &Path) -> u16 {
    let bytes = std::fs::read(elf).unwrap();
    u16::from_le_bytes([bytes[18], bytes[19]])
}

/// Unpacks `package` and checks every ELF in it; returns how many it saw.
fn assert_floor_and_libraries(package: &str, arch: &str) -> usize {
    let dir = scratch_dir("unpacked");
    unpack(package, &dir);
    let elves = elf_files(&dir);
    let want_machine = if arch == "aarch64" { 183 } else { 62 };
    for elf in &elves {
        let name = elf.strip_prefix(&dir).unwrap().display().to_string();
        let glibc = highest_glibc(elf);
        assert!(glibc <= FLOOR, "{package}: {name} needs GLIBC_{}.{} (floor 2.28)", glibc.0, glibc.1);
        let extra: Vec<String> = needed(elf).into_iter().filter(|n| !ALLOWED.contains(&n.as_str())).collect();
        assert!(extra.is_empty(), "{package}: {name} needs {extra:?} beyond glibc and libgcc_s");
        assert_eq!(machine(elf), want_machine, "{package}: {name} is not {arch}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    elves.len()
}

#[test]
#[ignore = "root, minutes: builds the x86_64 and aarch64 packages of each Slurm release (tests/run --packages)"]
fn every_elf_of_each_release_s_x86_64_and_aarch64_deb_and_rpm_needs_at_most_glibc_2_28_and_only_glibc_and_libgcc_s() {
    for arch in ["x86_64", "aarch64"] {
        for rel in RELEASES {
            let p = build_packages(arch, rel, None, None);
            let deb_arch = if arch == "aarch64" { "arm64" } else { "amd64" };
            assert!(p.deb.ends_with(&format!("+slurm{rel}_{deb_arch}.deb")), "{}", p.deb);
            assert!(p.rpm.ends_with(&format!(".slurm{rel}.{arch}.rpm")), "{}", p.rpm);
            let rpm_arch = text(&run(&["rpm", "-qp", "--qf", "%{ARCH}", &p.rpm]));
            assert_eq!(rpm_arch.trim(), arch, "{}", p.rpm);
            // The agent, the preload and the plugin, in each package.
            assert_eq!(assert_floor_and_libraries(&p.deb, arch), 3, "{}", p.deb);
            assert_eq!(assert_floor_and_libraries(&p.rpm, arch), 3, "{}", p.rpm);
        }
    }
}

#[test]
#[ignore = "root, minutes: builds the x86_64 packages and a Debian 11 root (tests/run --packages)"]
fn the_x86_64_agent_runs_its_version_and_check_and_the_preload_loads_in_debian_11() {
    let p = build_packages("x86_64", "22.05", None, None);
    let bullseye = pristine_root("bullseye");
    let glibc = text(&run(&["sh", "-c", &format!("ls {}/lib/x86_64-linux-gnu/libc-2.*.so", bullseye.display())]));
    assert!(glibc.contains("libc-2.31.so"), "the bullseye root's glibc: {glibc}");
    let dir = scratch_dir("bullseye-bin");
    unpack(&p.deb, &dir);
    let root = ScratchRoot::over(&bullseye, &[dir.to_str().unwrap()]);
    let agent = format!("{}/usr/libexec/syndeo/syndeo-agent", dir.display());

    let version = root.ok(&[&agent, "--version"]);
    assert!(version.starts_with("syndeo-agent "), "{version}");
    // check reads the node (no Slurm in this root: FAILs, exit 1), but runs:
    // no loader error, one OK/WARN/FAIL line per check.
    let check = root.run(&[&agent, "check"]);
    let out = text(&check);
    assert!(matches!(check.status.code(), Some(0 | 1)), "check: {out}");
    assert!(!out.contains("GLIBC_") && !out.contains("error while loading"), "{out}");
    assert!(out.lines().filter(|l| ["OK ", "WARN ", "FAIL "].iter().any(|s| l.starts_with(s))).count() >= 3, "{out}");
    let preload = format!("{}/usr/libexec/syndeo/syndeo-preload.so", dir.display());
    let loaded = root.run(&["env", &format!("LD_PRELOAD={preload}"), "/bin/true"]);
    assert!(loaded.status.success() && text(&loaded).is_empty(), "LD_PRELOAD: {}", text(&loaded));
    drop(root);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[ignore = "root, minutes: builds the aarch64 packages; qemu-user-static (tests/run --packages)"]
fn the_aarch64_agent_prints_its_version_and_help_under_qemu() {
    let p = build_packages("aarch64", "22.05", None, None);
    let dir = scratch_dir("aarch64-bin");
    unpack(&p.deb, &dir);
    let agent = format!("{}/usr/libexec/syndeo/syndeo-agent", dir.display());
    let qemu = |arg: &str| run(&["qemu-aarch64-static", "-L", "/usr/aarch64-linux-gnu", &agent, arg]);
    let version = qemu("--version");
    assert!(version.status.success() && text(&version).starts_with("syndeo-agent "), "{}", text(&version));
    let help = qemu("--help");
    assert!(help.status.success() && text(&help).contains("check"), "{}", text(&help));
    std::fs::remove_dir_all(&dir).unwrap();
}
