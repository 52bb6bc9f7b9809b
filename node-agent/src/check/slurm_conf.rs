//! Slurm's settings as `check` sees them: `scontrol show config` (what the
//! running controller uses), or, when that fails (slurmctld down, no
//! munge), slurm.conf itself, read from `SLURM_CONF` or /etc/slurm. Also
//! where the plugstack file and the plugin directories are.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::NodeFacts;

/// Where Slurm's packages put their plugins, for when `PluginDir` is unknown.
const PACKAGE_PLUGIN_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "/usr/lib/aarch64-linux-gnu/slurm-wlm",
    "/usr/lib64/slurm",
    "/usr/lib/slurm",
    "/usr/local/lib/slurm",
];

#[derive(Debug, Clone)]
pub struct SlurmSettings {
    /// Keys in lower case (Slurm's keys are case-insensitive).
    values: BTreeMap<String, String>,
    /// Where the values came from, for the report.
    pub source: String,
    /// Whether any settings were found at all.
    pub known: bool,
    /// slurm.conf's directory.
    pub conf_dir: PathBuf,
}

impl SlurmSettings {
    pub fn read(node: &dyn NodeFacts) -> SlurmSettings {
        let env_conf = node.env_var("SLURM_CONF").map(PathBuf::from);
        match node.slurm_config() {
            Ok(raw) => {
                let values: BTreeMap<String, String> =
                    raw.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
                let conf = env_conf.or_else(|| values.get("slurm_conf").map(PathBuf::from));
                let conf_dir = conf_dir(conf.as_deref());
                SlurmSettings { values, source: "scontrol show config".into(), known: true, conf_dir }
            }
            Err(e) => {
                let conf_dir = conf_dir(env_conf.as_deref());
                let file = env_conf.unwrap_or_else(|| conf_dir.join("slurm.conf"));
                match node.read_text(&file) {
                    Ok(text) => SlurmSettings {
                        values: parse_slurm_conf(&text),
                        source: format!("{}, as {e:#}", file.display()),
                        known: true,
                        conf_dir,
                    },
                    Err(e2) => SlurmSettings {
                        values: BTreeMap::new(),
                        source: format!("{e:#}, and {}: {e2}", file.display()),
                        known: false,
                        conf_dir,
                    },
                }
            }
        }
    }

    /// A setting's value; Slurm's "(null)" counts as unset.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(&key.to_ascii_lowercase()).map(String::as_str).filter(|v| !v.is_empty() && *v != "(null)")
    }

    /// The SPANK plugin stack file: `PlugStackConfig`, else plugstack.conf beside slurm.conf.
    pub fn plugstack(&self) -> PathBuf {
        self.get("PlugStackConfig").map(PathBuf::from).unwrap_or_else(|| self.conf_dir.join("plugstack.conf"))
    }

    /// `PluginDir`'s directories, else the packages' usual ones.
    pub fn plugin_dirs(&self) -> Vec<PathBuf> {
        match self.get("PluginDir") {
            Some(dirs) => dirs.split(':').filter(|d| !d.is_empty()).map(PathBuf::from).collect(),
            None => PACKAGE_PLUGIN_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

fn conf_dir(conf: Option<&Path>) -> PathBuf {
    conf.and_then(Path::parent).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/etc/slurm"))
}

/// `scontrol show config`'s `Key = value` lines.
pub fn parse_show_config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| !k.trim().is_empty() && !k.trim().contains(' '))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// slurm.conf's `Key=Value` settings (the first word of each line; node and
/// partition lines add nothing `check` reads).
fn parse_slurm_conf(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim_matches('"').to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeNode;
    use super::*;

    #[test]
    fn show_config_lines_are_read_with_padding_and_equals_in_values() {
        let v = parse_show_config(
            "Configuration data as of 2026-01-01T00:00:00\nAuthInfo                = cred_expire=30\n\
             PrologFlags             = Alloc,Contain\nPlugStackConfig         = /etc/slurm/plugstack.conf\n",
        );
        assert_eq!(v["PrologFlags"], "Alloc,Contain");
        assert_eq!(v["AuthInfo"], "cred_expire=30");
        assert!(!v.keys().any(|k| k.starts_with("Configuration")), "{v:?}");
    }

    #[test]
    fn without_scontrol_the_settings_come_from_slurm_conf_and_say_so() {
        let mut node = FakeNode::healthy();
        node.slurm_config = Err("slurmctld is down".into());
        node.file(
            "/etc/slurm/slurm.conf",
            "# c\nPrologFlags=Alloc # x\nNodeName=n1 CPUs=2\nProctrackType=proctrack/cgroup\n",
        );
        let s = SlurmSettings::read(&node);
        assert!(s.known);
        assert_eq!(s.get("prologflags"), Some("Alloc"));
        assert_eq!(s.get("ProctrackType"), Some("proctrack/cgroup"));
        assert!(s.source.contains("/etc/slurm/slurm.conf") && s.source.contains("slurmctld is down"), "{}", s.source);
        assert_eq!(s.plugstack(), PathBuf::from("/etc/slurm/plugstack.conf"));
    }

    #[test]
    fn slurm_conf_in_the_environment_names_the_config_dir() {
        let mut node = FakeNode::healthy();
        node.slurm_config = Err("down".into());
        node.env.insert("SLURM_CONF".into(), "/opt/slurm/etc/slurm.conf".into());
        node.file("/opt/slurm/etc/slurm.conf", "PluginDir=/opt/slurm/lib/slurm:/opt/more\n");
        let s = SlurmSettings::read(&node);
        assert_eq!(s.plugstack(), PathBuf::from("/opt/slurm/etc/plugstack.conf"));
        assert_eq!(s.plugin_dirs(), [PathBuf::from("/opt/slurm/lib/slurm"), PathBuf::from("/opt/more")]);
    }

    #[test]
    fn with_neither_source_nothing_is_known_and_plugins_are_looked_for_where_packages_put_them() {
        let mut node = FakeNode::healthy();
        node.slurm_config = Err("down".into());
        node.files.remove(Path::new("/etc/slurm/slurm.conf"));
        let s = SlurmSettings::read(&node);
        assert!(!s.known && s.get("PrologFlags").is_none());
        assert!(s.plugin_dirs().contains(&PathBuf::from("/usr/lib64/slurm")));
    }

    #[test]
    fn null_values_count_as_unset() {
        let mut node = FakeNode::healthy();
        node.slurm_config = Ok([("PlugStackConfig".to_string(), "(null)".to_string())].into());
        assert_eq!(SlurmSettings::read(&node).plugstack(), PathBuf::from("/etc/slurm/plugstack.conf"));
    }
}
