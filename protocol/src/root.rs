//! What the plugin asks of the root side: `syndeo-agent prolog|start|epilog`
//! and their arguments, encoded to an argv by [`RootRequest::encode`] (the
//! plugin) and decoded by [`RootRequest::decode`] (the agent) only here.
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::layout::{DEFAULT_CONFIG, DEFAULT_RUNTIME_BASE};
use crate::rlimits;

/// What every root-side command is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    pub job: u32,
    pub uid: u32,
    pub config: PathBuf,
    pub runtime_base: PathBuf,
}

/// `prolog`: set up this node for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prolog {
    pub common: Common,
    pub gid: u32,
    /// The value of --syndeo=IMAGE, if one was given (checked again there).
    pub image: Option<String>,
    /// The resource limits Slurm propagates to tasks (PropagateResourceLimits).
    pub propagate: Vec<String>,
}

/// `start`: start the node agent of a prepared job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub common: Common,
    /// Wait for "go" on stdin first (see [`crate::handshake`]).
    pub hold: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootRequest {
    Prolog(Prolog),
    Start(Start),
    Epilog(Common),
}

const PROLOG: &str = "prolog";
const START: &str = "start";
const EPILOG: &str = "epilog";
/// The subcommands of `syndeo-agent` that [`RootRequest`] is.
pub const VERBS: [&str; 3] = [PROLOG, START, EPILOG];

const JOB: &str = "job";
const UID: &str = "uid";
const CONFIG: &str = "config";
const RUNTIME_BASE: &str = "runtime-base";
const GID: &str = "gid";
const IMAGE: &str = "image";
const PROPAGATE: &str = "propagate";
const HOLD: &str = "hold";
/// The arguments [`RootRequest::decode`] reads, for `syndeo-agent`'s help.
pub const ARGS_HELP: &str = "--job=N --uid=N [--config=PATH] [--runtime-base=PATH]; \
                             prolog: --gid=N [--image=IMAGE] [--propagate=NAMES]; start: [--hold]";

fn opt(name: &str, value: impl AsRef<OsStr>) -> OsString {
    let mut a = OsString::from(format!("--{name}="));
    a.push(value);
    a
}

impl RootRequest {
    pub fn common(&self) -> &Common {
        match self {
            RootRequest::Prolog(p) => &p.common,
            RootRequest::Start(s) => &s.common,
            RootRequest::Epilog(c) => c,
        }
    }

    /// The verb and its arguments, each `--name=value` (one argument
    /// whatever the value holds) or a bare `--flag`.
    pub fn encode(&self) -> Vec<OsString> {
        let verb = match self {
            RootRequest::Prolog(_) => PROLOG,
            RootRequest::Start(_) => START,
            RootRequest::Epilog(_) => EPILOG,
        };
        let c = self.common();
        let mut argv = vec![
            verb.into(),
            opt(JOB, c.job.to_string()),
            opt(UID, c.uid.to_string()),
            opt(CONFIG, &c.config),
            opt(RUNTIME_BASE, &c.runtime_base),
        ];
        match self {
            RootRequest::Prolog(p) => {
                argv.push(opt(GID, p.gid.to_string()));
                argv.push(opt(PROPAGATE, p.propagate.join(",")));
                argv.extend(p.image.as_ref().map(|i| opt(IMAGE, i)));
            }
            RootRequest::Start(s) if s.hold => argv.push(format!("--{HOLD}").into()),
            RootRequest::Start(_) | RootRequest::Epilog(_) => {}
        }
        argv
    }

    /// Reads what [`encode`](Self::encode) wrote (the verb first); also
    /// `--name value`, and the defaults of what an admin may leave out.
    pub fn decode<I: IntoIterator<Item = OsString>>(argv: I) -> Result<RootRequest, String> {
        let mut argv = argv.into_iter();
        let verb = argv.next().ok_or("no command")?;
        let mut args = Args::read(argv)?;
        let common = Common {
            job: args.number(JOB)?,
            uid: args.number(UID)?,
            config: args.take(CONFIG).map_or_else(|| DEFAULT_CONFIG.into(), PathBuf::from),
            runtime_base: args.take(RUNTIME_BASE).map_or_else(|| DEFAULT_RUNTIME_BASE.into(), PathBuf::from),
        };
        let request = match verb.to_str() {
            Some(PROLOG) => RootRequest::Prolog(Prolog {
                common,
                gid: args.number(GID)?,
                image: args.take(IMAGE).map(|i| i.into_string().map_err(|_| "--image is not UTF-8")).transpose()?,
                propagate: match args.take(PROPAGATE) {
                    None => rlimits::names().map(String::from).collect(),
                    Some(p) => p.to_string_lossy().split(',').filter(|s| !s.is_empty()).map(String::from).collect(),
                },
            }),
            Some(START) => RootRequest::Start(Start { common, hold: args.flag(HOLD)? }),
            Some(EPILOG) => RootRequest::Epilog(common),
            _ => return Err(format!("unknown command {verb:?}")),
        };
        args.done()?;
        Ok(request)
    }
}

/// The `--name[=value]` arguments of a command line, by name, each once.
struct Args(Vec<(String, Option<OsString>)>);

impl Args {
    fn read(argv: impl Iterator<Item = OsString>) -> Result<Args, String> {
        let mut argv = argv.peekable();
        let mut out: Vec<(String, Option<OsString>)> = Vec::new();
        while let Some(arg) = argv.next() {
            let text = arg.to_string_lossy();
            let Some(body) = text.strip_prefix("--") else { return Err(format!("unexpected argument {arg:?}")) };
            let (name, value) = match body.split_once('=') {
                // The value keeps its bytes: the prefix before it is ASCII.
                Some((name, _)) => (name.to_string(), Some(split_value(&arg, name.len() + 3))),
                None if argv.peek().is_some_and(|v| !v.to_string_lossy().starts_with("--")) => {
                    (body.to_string(), argv.next())
                }
                None => (body.to_string(), None),
            };
            if out.iter().any(|(n, _)| *n == name) {
                return Err(format!("--{name} given more than once"));
            }
            out.push((name, value));
        }
        Ok(Args(out))
    }

    fn take(&mut self, name: &str) -> Option<OsString> {
        let i = self.0.iter().position(|(n, _)| n == name)?;
        self.0.remove(i).1
    }

    fn number(&mut self, name: &str) -> Result<u32, String> {
        let v = self.take(name).ok_or_else(|| format!("--{name} is required"))?;
        v.to_str().and_then(|v| v.parse().ok()).ok_or_else(|| format!("--{name}: not a number: {v:?}"))
    }

    fn flag(&mut self, name: &str) -> Result<bool, String> {
        let Some(i) = self.0.iter().position(|(n, _)| n == name) else { return Ok(false) };
        match self.0.remove(i).1 {
            None => Ok(true),
            Some(v) => Err(format!("--{name} takes no value ({v:?})")),
        }
    }

    fn done(self) -> Result<(), String> {
        match self.0.first() {
            None => Ok(()),
            Some((name, _)) => Err(format!("unexpected argument --{name}")),
        }
    }
}

/// The bytes of `arg` from `at` on.
fn split_value(arg: &OsStr, at: usize) -> OsString {
    use std::os::unix::ffi::OsStrExt;
    OsStr::from_bytes(&arg.as_bytes()[at..]).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common() -> Common {
        Common { job: 42, uid: 1000, config: "/etc/syndeo/syndeo.toml".into(), runtime_base: "/run/syndeo".into() }
    }

    /// What the plugin can send, with awkward values.
    fn samples() -> Vec<RootRequest> {
        let prolog = |image: Option<&str>, propagate: &[&str]| {
            RootRequest::Prolog(Prolog {
                common: common(),
                gid: 100,
                image: image.map(String::from),
                propagate: propagate.iter().map(|s| s.to_string()).collect(),
            })
        };
        vec![
            prolog(Some("/img/ray.sif"), &["CORE", "NOFILE"]),
            prolog(Some("-rf"), &[]),
            prolog(Some("--job=7 x=y"), &rlimits::names().collect::<Vec<_>>()),
            prolog(None, &["AS"]),
            RootRequest::Start(Start { common: common(), hold: true }),
            RootRequest::Start(Start { common: common(), hold: false }),
            RootRequest::Epilog(Common { config: "/odd path/=x.toml".into(), ..common() }),
        ]
    }

    #[test]
    fn every_request_reads_back_equal() {
        for r in samples() {
            assert_eq!(RootRequest::decode(r.encode()), Ok(r.clone()), "{:?}", r.encode());
        }
    }

    #[test]
    fn the_argv_is_the_verb_and_one_argument_per_value() {
        let argv = samples()[0].encode();
        let text: Vec<_> = argv.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            text.join(" "),
            "prolog --job=42 --uid=1000 --config=/etc/syndeo/syndeo.toml --runtime-base=/run/syndeo --gid=100 \
             --propagate=CORE,NOFILE --image=/img/ray.sif"
        );
    }

    #[test]
    fn the_help_names_every_argument() {
        for name in [JOB, UID, CONFIG, RUNTIME_BASE, GID, IMAGE, PROPAGATE, HOLD] {
            assert!(ARGS_HELP.contains(&format!("--{name}")), "{name}");
        }
    }

    #[test]
    fn an_admin_may_use_spaces_and_leave_out_the_defaults() {
        let argv = ["epilog", "--job", "42", "--uid", "1000"].map(OsString::from);
        let want = Common { config: DEFAULT_CONFIG.into(), runtime_base: DEFAULT_RUNTIME_BASE.into(), ..common() };
        assert_eq!(RootRequest::decode(argv), Ok(RootRequest::Epilog(want)));
        let argv = ["prolog", "--job=1", "--uid=2", "--gid=3"].map(OsString::from);
        let Ok(RootRequest::Prolog(p)) = RootRequest::decode(argv) else { panic!() };
        assert_eq!(p.propagate.len(), rlimits::KINDS.len());
    }

    #[test]
    fn missing_repeated_unknown_and_bad_arguments_are_refused() {
        for argv in [
            &["epilog", "--uid=1"][..],
            &["epilog", "--job=1", "--uid=1", "--job=2"],
            &["epilog", "--job=1", "--uid=1", "--gid=2"],
            &["epilog", "--job=x", "--uid=1"],
            &["start", "--job=1", "--uid=1", "--hold=yes"],
            &["epilog", "--job=1", "--uid=1", "stray"],
            &["serve", "--job=1", "--uid=1"],
        ] {
            assert!(RootRequest::decode(argv.iter().map(OsString::from)).is_err(), "{argv:?}");
        }
    }
}
