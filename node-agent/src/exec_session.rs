//! A container run on the user's terminal gets a session of its own, so that
//! nothing in the image has that terminal as its controlling terminal and
//! TIOCSTI from the image cannot queue input for the user's shell
//! (CVE-2017-5226). bubblewrap does this itself (`--new-session`); `apptainer
//! exec` has no such option, so [`run_in_own_session`] starts the container
//! under util-linux's `setsid` as a child, forwards the signals a terminal or
//! Slurm sends to it, and returns its status. Without a terminal on stdin,
//! stdout or stderr the container simply replaces this process, as before.
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use nix::sys::pthread::{pthread_kill, pthread_self};
use nix::sys::signal::{kill, raise, SigSet, Signal};
use nix::unistd::{isatty, Pid};

/// Where util-linux's `setsid` may be (it is essential on every distribution).
const SETSID: [&str; 2] = ["/usr/bin/setsid", "/bin/setsid"];

/// The signals passed on to the container (a terminal's and Slurm's).
const FORWARDED: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
];

/// Whether any of stdin, stdout and stderr is a terminal.
pub fn on_a_terminal() -> bool {
    (0..3).any(|fd| isatty(fd).unwrap_or(false))
}

/// `setsid` followed by `cmd`'s program and arguments, with `cmd`'s
/// environment changes; None if no `setsid` is installed.
fn under_setsid(cmd: &Command) -> Option<Command> {
    let setsid = SETSID.iter().find(|p| std::path::Path::new(p).exists())?;
    let mut c = Command::new(setsid);
    c.arg(cmd.get_program()).args(cmd.get_args());
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
pub fn run_in_own_session(cmd: &Command) -> anyhow::Result<i32> {
    let Some(mut c) = under_setsid(cmd) else { anyhow::bail!("no setsid in {SETSID:?} (util-linux)") };
    let mut set = SigSet::empty();
    FORWARDED.iter().chain(&[Signal::SIGTSTP, Signal::SIGCHLD]).for_each(|s| set.add(*s));
    // Blocked here (and so in the waiting thread) and taken by sigwait; std
    // empties the child's mask.
    set.thread_block()?;
    let mut child = c.spawn().map_err(|e| anyhow::anyhow!("cannot run {:?}: {e}", c.get_program()))?;
    // Our own child, reaped only by the waiter: its PID stays its own while
    // we signal it. The waiter wakes this thread's sigwait when it ends.
    let pid = Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    let me = pthread_self();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
        let _ = pthread_kill(me, Signal::SIGCHLD);
    });
    loop {
        match set.wait()? {
            Signal::SIGCHLD => {
                if let Ok(status) = rx.try_recv() {
                    let status = status?;
                    return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
                }
            }
            // The child's session is orphaned, where SIGTSTP is dropped: stop
            // it outright, then ourselves; SIGCONT is passed on like the rest.
            Signal::SIGTSTP => {
                let _ = kill(pid, Signal::SIGSTOP);
                let _ = raise(Signal::SIGSTOP);
            }
            s => {
                let _ = kill(pid, s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_command_runs_under_setsid_with_its_arguments_and_environment() {
        let mut cmd = Command::new("apptainer");
        cmd.args(["exec", "img.sif", "python3"]).env("RAY_ADDRESS", "10.0.0.1:6379").env_remove("PYTHONPATH");
        let c = under_setsid(&cmd).expect("util-linux's setsid is installed here");
        assert!(SETSID.contains(&c.get_program().to_str().unwrap()));
        let args: Vec<_> = c.get_args().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(args, ["apptainer", "exec", "img.sif", "python3"]);
        let envs: Vec<_> = c.get_envs().map(|(k, v)| (k.to_str().unwrap(), v.map(|v| v.to_str().unwrap()))).collect();
        assert!(envs.contains(&("RAY_ADDRESS", Some("10.0.0.1:6379"))) && envs.contains(&("PYTHONPATH", None)));
    }

    #[test]
    fn the_child_is_in_a_session_of_its_own_and_its_exit_code_comes_back() {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", r#"[ "$(ps -o sid= -p $$)" -eq $$ ] && exit 7 || exit 3"#]);
        assert_eq!(run_in_own_session(&cmd).unwrap(), 7);
    }
}
