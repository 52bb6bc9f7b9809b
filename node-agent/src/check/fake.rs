//! A fake node for the checks' unit tests: every fact is a field, and
//! [`FakeNode::healthy`] is a node where every check passes (bubblewrap,
//! Slurm 22.05 with Contain and the cgroup plugins). A test breaks one fact
//! and looks at the one decision.
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};

use super::facts::{Outcome, ProbeReport};
use super::{FileInfo, NodeFacts, ProbeRequest, ProbeUser};

pub struct FakeNode {
    pub files: HashMap<PathBuf, String>,
    /// Every entry that exists (files included), for `lstat`, `stat` and `list_dir`.
    pub stats: HashMap<PathBuf, FileInfo>,
    pub slurm_config: Result<BTreeMap<String, String>, String>,
    pub slurm_version: Result<String, String>,
    pub env: HashMap<String, String>,
    pub plugin_versions: HashMap<PathBuf, u32>,
    pub secrets: HashMap<PathBuf, Vec<u8>>,
    pub exe: Option<PathBuf>,
    pub runtime_report: ProbeReport,
    pub userns_report: ProbeReport,
    /// The probes asked for, in order.
    pub probes: RefCell<Vec<ProbeRequest>>,
}

const PLUGIN: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm/syndeo.so";

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

impl FakeNode {
    pub fn nobody() -> ProbeUser {
        ProbeUser { name: "nobody".into(), uid: 65534, gid: 65534 }
    }

    /// A text file, root's, mode 0644.
    pub fn file(&mut self, path: &str, text: &str) {
        self.files.insert(path.into(), text.into());
        self.stats.insert(path.into(), FileInfo::file(0, 0o644));
    }

    pub fn set_stat(&mut self, path: &str, info: FileInfo) {
        self.stats.insert(path.into(), info);
    }

    pub fn healthy() -> FakeNode {
        let mut n = FakeNode {
            files: HashMap::new(),
            stats: HashMap::new(),
            slurm_config: Ok(settings(&[
                ("PrologFlags", "Alloc,Contain"),
                ("ProctrackType", "proctrack/cgroup"),
                ("TaskPlugin", "task/cgroup,task/affinity"),
                ("PlugStackConfig", "/etc/slurm/plugstack.conf"),
                ("PluginDir", "/usr/lib/x86_64-linux-gnu/slurm-wlm"),
                ("SLURM_CONF", "/etc/slurm/slurm.conf"),
            ])),
            slurm_version: Ok("22.05.8".into()),
            env: HashMap::new(),
            plugin_versions: [(PathBuf::from(PLUGIN), (22 << 16) | (5 << 8))].into(),
            secrets: [(PathBuf::from("/etc/syndeo/site.key"), "k".repeat(64).into_bytes())].into(),
            exe: Some("/usr/libexec/syndeo/syndeo-agent".into()),
            runtime_report: ProbeReport {
                version: Some(Outcome::ok("bubblewrap 0.8.0")),
                start: Some(Outcome::ok("/usr/bin/bwrap --unshare-user --ro-bind / / -- true")),
                ..Default::default()
            },
            userns_report: ProbeReport { userns: Some(Outcome::ok("unshare(CLONE_NEWUSER)")), ..Default::default() },
            probes: RefCell::new(vec![]),
        };
        n.file("/etc/syndeo/syndeo.toml", "runtime = \"bubblewrap\"\n");
        n.file("/etc/slurm/slurm.conf", "PrologFlags=Alloc,Contain\nProctrackType=proctrack/cgroup\n");
        n.file("/etc/slurm/plugstack.conf", "include /etc/slurm/plugstack.conf.d/*.conf\n");
        n.file("/etc/slurm/plugstack.conf.d/syndeo.conf", "# syndeo\nrequired syndeo.so agent=/x\n");
        n.file("/etc/slurm/plugstack.conf.d/other.conf.dpkg-old", "required syndeo.so\n");
        n.file("/proc/sys/user/max_user_namespaces", "63352\n");
        n.file("/proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
        n.file("/proc/sys/net/ipv4/ip_unprivileged_port_start", "1024\n");
        for (path, info) in [
            (PLUGIN, FileInfo::file(0, 0o755)),
            ("/etc/syndeo/site.key", FileInfo::file(0, 0o600)),
            ("/usr/bin/bwrap", FileInfo::file(0, 0o755)),
            ("/usr/bin/apptainer", FileInfo::file(0, 0o755)),
            ("/usr/libexec/syndeo/syndeo-preload.so", FileInfo::file(0, 0o644)),
            ("/dev/fuse", FileInfo::char_device(0o666, (10, 229))),
            ("/", FileInfo::dir(0, 0o755)),
            ("/tmp", FileInfo::dir(0, 0o1777)),
            ("/tmp/syndeo", FileInfo::dir(0, 0o755)),
            ("/run", FileInfo::dir(0, 0o755)),
            ("/run/syndeo-shm", FileInfo::dir(0, 0o755)),
            ("/var", FileInfo::dir(0, 0o755)),
            ("/var/lib", FileInfo::dir(0, 0o755)),
        ] {
            n.set_stat(path, info);
        }
        n
    }

    fn missing(path: &Path) -> io::Error {
        io::Error::new(io::ErrorKind::NotFound, format!("{}: No such file or directory", path.display()))
    }
}

impl NodeFacts for FakeNode {
    fn slurm_config(&self) -> Result<BTreeMap<String, String>> {
        self.slurm_config.clone().map_err(|e| anyhow!(e))
    }

    fn slurm_version(&self) -> Result<String> {
        self.slurm_version.clone().map_err(|e| anyhow!(e))
    }

    fn env_var(&self, name: &str) -> Option<String> {
        self.env.get(name).cloned()
    }

    fn read_text(&self, path: &Path) -> io::Result<String> {
        self.files.get(path).cloned().ok_or_else(|| Self::missing(path))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let names: Vec<String> = self
            .stats
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        if names.is_empty() && !self.stats.contains_key(dir) {
            return Err(Self::missing(dir));
        }
        Ok(names)
    }

    fn lstat(&self, path: &Path) -> io::Result<FileInfo> {
        self.stats.get(path).copied().ok_or_else(|| Self::missing(path))
    }

    fn stat(&self, path: &Path) -> io::Result<FileInfo> {
        self.lstat(path)
    }

    fn plugin_version(&self, so: &Path) -> Result<u32> {
        self.plugin_versions.get(so).copied().ok_or_else(|| anyhow!("{}: no plugin_version", so.display()))
    }

    fn read_secret(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.secrets.get(path).cloned().ok_or_else(|| Self::missing(path))
    }

    fn agent_exe(&self) -> Option<PathBuf> {
        self.exe.clone()
    }

    fn probe(&self, req: &ProbeRequest, _user: &ProbeUser) -> Result<ProbeReport> {
        self.probes.borrow_mut().push(req.clone());
        Ok(match req {
            ProbeRequest::UserNamespace => self.userns_report.clone(),
            ProbeRequest::Runtime { .. } => self.runtime_report.clone(),
        })
    }
}
