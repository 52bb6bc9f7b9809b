//! Helpers of the package tests (package_floor, package_rpm, package_deb),
//! which need no minicluster: build the deb and the RPM with packaging/build,
//! open them, and install them into throwaway roots. A throwaway root is an
//! overlay over a pristine copy of a cached Debian root (tests/cluster/roots
//! pristine, which no minicluster installs into), mounted afresh in
//! a private mount namespace for each command: the cached root never
//! changes, and nothing stays mounted. Needs root.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::{repo, text};

/// The deb and the RPM of one build.
pub struct Packages {
    pub deb: String,
    pub rpm: String,
}

/// `tests/cluster/roots path NAME`: the cached root of a Slurm release
/// ("/" for the host's 22.05) or of `bullseye`, built when missing.
pub fn debian_root(name: &str) -> PathBuf {
    roots("path", name)
}

/// `tests/cluster/roots VERB NAME`: the path it prints last.
fn roots(verb: &str, name: &str) -> PathBuf {
    let o = Command::new(repo().join("tests/cluster/roots")).args([verb, name]).output().unwrap();
    assert!(o.status.success(), "roots {verb} {name}: {}", text(&o));
    PathBuf::from(String::from_utf8_lossy(&o.stdout).lines().last().expect("a root path").trim())
}

/// `tests/cluster/roots pristine NAME`: the copy of a release's cached root
/// (or bullseye's) that no minicluster installs into, built when missing: the
/// lower layer of a [`ScratchRoot`]. A minicluster of the same release, which
/// may run beside the package tests, installs syndeo into the root itself
/// (and its packaging test the deb), and an overlay shows its lower layer's
/// changes: a config file that appeared there after [`ScratchRoot`]'s first
/// command made dpkg ask whether to keep it.
pub fn pristine_root(name: &str) -> PathBuf {
    roots("pristine", name)
}

/// Slurm `release`'s headers: its root's /usr/include.
pub fn slurm_headers(release: &str) -> String {
    let root = debian_root(release);
    format!("{}/usr/include", if root == Path::new("/") { "" } else { root.to_str().unwrap() })
}

/// `packaging/build --arch ARCH` against Slurm `release`'s headers, as
/// `version` (None: the workspace's), packaging the config files of `etc`
/// (None: the checkout's etc/). Each (arch, release, version) has its own
/// output directory under packaging/out/tests.
pub fn build_packages(arch: &str, release: &str, version: Option<&str>, etc: Option<&Path>) -> Packages {
    let out = repo().join(format!("packaging/out/tests/{arch}-{release}-{}", version.unwrap_or("dev")));
    let mut cmd = Command::new(repo().join("packaging/build"));
    cmd.args(["--arch", arch])
        .env("SLURM_INCLUDE_DIR", slurm_headers(release))
        .env("SYNDEO_PKG_OUT", &out)
        .stdin(Stdio::null());
    if let Some(v) = version {
        cmd.env("SYNDEO_VERSION", v);
    }
    if let Some(e) = etc {
        cmd.env("SYNDEO_ETC_DIR", e);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "packaging/build --arch {arch} for {release}: {}", text(&o));
    let paths: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    let find =
        |ext: &str| paths.iter().find(|p| p.ends_with(ext)).unwrap_or_else(|| panic!("no {ext} in {paths:?}")).clone();
    Packages { deb: find(".deb"), rpm: find(".rpm") }
}

/// A fresh empty directory (removed with `rm -rf` by its owner).
pub fn scratch_dir(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir =
        std::env::temp_dir().join(format!("syndeo-{what}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The line the next version (0.1.1) adds to syndeo.toml, in [`changed_etc`].
pub const CHANGED: &str = "# changed in 0.1.1";

/// A copy of the checkout's etc/ whose syndeo.toml the next version changed.
pub fn changed_etc() -> PathBuf {
    let dir = scratch_dir("etc-0.1.1");
    let o = crate::run(&["cp", "-a", &format!("{}/etc/.", repo().display()), dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let toml = std::fs::read_to_string(dir.join("syndeo.toml")).unwrap();
    std::fs::write(dir.join("syndeo.toml"), format!("{toml}{CHANGED}\n")).unwrap();
    dir
}

/// The directory of the package file `p`.
pub fn dir_of(p: &str) -> String {
    Path::new(p).parent().unwrap().to_str().unwrap().to_string()
}

/// Every file of a deb (dpkg-deb -x) or an RPM (rpm2archive, no cpio
/// needed) unpacked into `into`.
pub fn unpack(package: &str, into: &Path) {
    let into = into.to_str().unwrap();
    let script = if package.ends_with(".deb") {
        format!("dpkg-deb -x '{package}' '{into}'")
    } else {
        format!("rpm2archive - < '{package}' | tar -xzf - -C '{into}'")
    };
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(o.status.success(), "unpacking {package}: {}", text(&o));
}

/// The ELF files under `dir` (regular files starting with \x7fELF).
pub fn elf_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            found.extend(elf_files(&path));
        } else if meta.is_file() && std::fs::read(&path).unwrap().starts_with(b"\x7fELF") {
            found.push(path);
        }
    }
    found
}

/// An overlay over a cached root: installs in it change only its own layer.
pub struct ScratchRoot {
    lower: PathBuf,
    dir: PathBuf,
    binds: Vec<String>,
}

impl ScratchRoot {
    /// Over `lower`, with `binds` (host directories) at their own paths inside.
    pub fn over(lower: &Path, binds: &[&str]) -> ScratchRoot {
        let dir = scratch_dir("root");
        for d in ["upper", "work", "merged"] {
            std::fs::create_dir(dir.join(d)).unwrap();
        }
        ScratchRoot { lower: lower.to_path_buf(), dir, binds: binds.iter().map(|b| b.to_string()).collect() }
    }

    /// Runs `argv` as root inside the root, with a plain environment.
    pub fn run(&self, argv: &[&str]) -> Output {
        let mount = format!(
            "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={} {} && exec \"$@\"",
            self.lower.display(),
            self.dir.join("upper").display(),
            self.dir.join("work").display(),
            self.dir.join("merged").display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c", &mount, "sh"])
            .arg(repo().join("tests/cluster/roots"))
            .arg("enter")
            .arg(self.dir.join("merged"));
        for b in &self.binds {
            cmd.args(["--bind", b]);
        }
        cmd.args(["--", "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LANG=C"])
            .args(argv)
            .stdin(Stdio::null());
        cmd.output().unwrap_or_else(|e| panic!("cannot run {argv:?} in {}: {e}", self.lower.display()))
    }

    /// `run`, which must succeed; its output.
    pub fn ok(&self, argv: &[&str]) -> String {
        let o = self.run(argv);
        assert!(o.status.success(), "{argv:?} failed in the root over {}: {}", self.lower.display(), text(&o));
        text(&o)
    }

    /// A file's content inside the root, None when it does not exist.
    pub fn read(&self, path: &str) -> Option<String> {
        let o = self.run(&["cat", path]);
        o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `stat -c FORMAT PATH` inside the root (e.g. "%a %U").
    pub fn stat(&self, format: &str, path: &str) -> String {
        self.ok(&["stat", "-c", format, path]).trim().to_string()
    }

    /// Whether `path` exists inside the root (a dangling link counts).
    pub fn exists(&self, path: &str) -> bool {
        self.run(&["test", "-e", path]).status.success() || self.run(&["test", "-L", path]).status.success()
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = Command::new("rm").arg("-rf").arg(&self.dir).status();
    }
}
