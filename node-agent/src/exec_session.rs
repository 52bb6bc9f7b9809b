//! A container run where the user has a terminal gets a session of its own,
//! so that nothing in the image has that terminal as its controlling
//! terminal and TIOCSTI from the image cannot queue input for the user's
//! shell (CVE-2017-5226). bubblewrap does this itself (`--new-session`);
//! `apptainer exec` has no such option, so [`run_in_own_session`] starts the
//! container under util-linux's `setsid` as a child, passes on the signals a
//! terminal or Slurm sends (to the container's whole process group), and
//! returns its status. What counts is a controlling terminal, not where
//! stdin and stdout go (`syndeo exec CMD < /dev/null > log &` from a shell
//! still has one). Without one the container simply replaces this process,
//! as before. Ctrl-Z stops this wrapper only (the container, in a session of
//! its own, keeps running until `fg`); a shell in the image has no job
//! control.
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::unistd::Pid;

/// Where util-linux's `setsid` may be (it is essential on every distribution).
const SETSID: [&str; 2] = ["/usr/bin/setsid", "/bin/setsid"];

/// The signals passed on to the container: every one a terminal, Slurm
/// (`scancel -s`, `--signal`) or the user may send that this wrapper can
/// catch, but for the terminal's stop (see the module's text) and the
/// synchronous faults.
const FORWARDED: [Signal; 13] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    Signal::SIGALRM,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGPWR,
    Signal::SIGIO,
];

/// Whether this process has a controlling terminal (`/dev/tty` opens).
pub fn has_a_controlling_terminal() -> bool {
    open("/dev/tty", OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC, Mode::empty())
        .map(|fd| {
            let _ = nix::unistd::close(fd);
        })
        .is_ok()
}

/// Passes `sig` on to the container's process group (its leader is `pid`,
/// after `setsid`), or to `pid` alone before `setsid` has run.
fn pass_on(pid: Pid, sig: Signal) {
    if kill(Pid::from_raw(-pid.as_raw()), sig) == Err(Errno::ESRCH) {
        let _ = kill(pid, sig);
    }
}

/// `setsid` followed by `cmd`'s program and arguments, with `cmd`'s
/// environment changes; None if no `setsid` is installed.
fn under_setsid(cmd: &Command) -> Option<Command> {
    let setsid = SETSID.iter().find(|p| std::path::Path::new(p).exists())?;
    let mut c = Command::new(setsid);
    // -w: wait for the program even if setsid had to fork for it.
    c.args(["-w", "--"]).arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    Some(c)
}

/// Runs `cmd` in a new session (see the module's text) and waits for it,
/// passing signals on; its exit code, or 128 + the signal that ended it.
/// Signals are taken by handlers (tokio's), never blocked: a blocked mask
/// would be the container's too.
pub fn run_in_own_session(cmd: &Command) -> anyhow::Result<i32> {
    let Some(c) = under_setsid(cmd) else { anyhow::bail!("no setsid in {SETSID:?} (util-linux)") };
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(c))
}

async fn run(c: Command) -> anyhow::Result<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The handlers first: a signal before them would end this wrapper alone.
    for s in FORWARDED {
        let mut stream = signal(SignalKind::from_raw(s as i32))?;
        let tx = tx.clone();
        tokio::spawn(async move { while stream.recv().await.is_some() && tx.send(s).is_ok() {} });
    }
    let program = c.get_program().to_owned();
    let mut child =
        tokio::process::Command::from(c).spawn().map_err(|e| anyhow::anyhow!("cannot run {program:?}: {e}"))?;
    let pid = Pid::from_raw(child.id().ok_or_else(|| anyhow::anyhow!("{program:?} ended at once"))? as i32);
    loop {
        tokio::select! {
            // First: once reaped, the child's PID is no longer ours to signal.
            biased;
            status = child.wait() => {
                let status = status?;
                return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
            }
            Some(s) = rx.recv() => pass_on(pid, s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal to the test process reaches every wrapper running in it:
    /// the tests that run one take turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn the_container_command_runs_under_setsid_with_its_arguments_and_environment() {
        let mut cmd = Command::new("apptainer");
        cmd.args(["exec", "img.sif", "python3"]).env("RAY_ADDRESS", "10.0.0.1:6379").env_remove("PYTHONPATH");
        let c = under_setsid(&cmd).expect("util-linux's setsid is installed here");
        assert!(SETSID.contains(&c.get_program().to_str().unwrap()));
        let args: Vec<_> = c.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["-w", "--", "apptainer", "exec", "img.sif", "python3"]);
        let envs: Vec<_> = c.get_envs().map(|(k, v)| (k.to_str().unwrap(), v.map(|v| v.to_str().unwrap()))).collect();
        assert!(envs.contains(&("RAY_ADDRESS", Some("10.0.0.1:6379"))) && envs.contains(&("PYTHONPATH", None)));
    }

    #[test]
    fn a_signal_to_the_wrapper_reaches_the_containers_process_group() {
        let _turn = turn();
        // The child, not the test, holds SIGUSR1 off; the wrapper passes it on.
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", "trap 'exit 42' USR1; kill -USR1 $PPID; sleep 30 & wait; exit 3"]);
        assert_eq!(run_in_own_session(&cmd).unwrap(), 42);
    }

    #[test]
    fn the_child_starts_with_no_signal_blocked() {
        let _turn = turn();
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", r#"grep -q "^SigBlk:[[:space:]]*0*$" /proc/self/status && exit 0 || exit 9"#]);
        assert_eq!(run_in_own_session(&cmd).unwrap(), 0, "the container would start with signals blocked");
    }

    #[test]
    fn the_child_is_in_a_session_of_its_own_and_its_exit_code_comes_back() {
        let _turn = turn();
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", r#"[ "$(ps -o sid= -p $$)" -eq $$ ] && exit 7 || exit 3"#]);
        assert_eq!(run_in_own_session(&cmd).unwrap(), 7);
    }
}
