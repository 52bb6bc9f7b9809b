//! The epilog's one deadline and its split among the stages. The plugin
//! kills the epilog after 150 s (`EPILOG_LIMIT` in the plugin's
//! `hooks/job_script.rs`), and a killed epilog fails the hook, which drains
//! the node; so the whole epilog gets `TOTAL` = 120 s from its start, and
//! each stage at most its share, never past the point where the later
//! stages would lose their minimum:
//!
//! | stage                                     | at most                 |
//! |-------------------------------------------|-------------------------|
//! | graceful stop (SIGTERM, the agent stops Ray) | `stop_grace`, capped at 30 s |
//! | kill loop (SIGKILL until none is left)    | 10 s                    |
//! | log copy (a child, as the user)           | 20 s, killed at the end |
//! | unmounts and removal of the job's trees   | the rest, at least 50 s |
//! | root's state and note, exit               | the last 5 s            |
use std::time::{Duration, Instant};

/// The whole epilog, well inside the plugin's 150 s.
pub const TOTAL: Duration = Duration::from_secs(120);
/// The graceful stop's cap, whatever `stop_grace` says.
pub const GRACE_MAX: Duration = Duration::from_secs(30);
pub const KILL: Duration = Duration::from_secs(10);
pub const LOGS: Duration = Duration::from_secs(20);
/// What the removal keeps however late the stages before it end.
pub const REMOVAL_MIN: Duration = Duration::from_secs(50);
/// Left after the removal: root's own state, the note, the exit.
pub const TAIL: Duration = Duration::from_secs(5);

/// The epilog's deadline, from its start.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    end: Instant,
}

impl Budget {
    pub fn start() -> Budget {
        Budget::ending(Instant::now() + TOTAL)
    }

    pub fn ending(end: Instant) -> Budget {
        Budget { end }
    }

    /// The graceful stop's deadline, for a site's `stop_grace` in seconds.
    pub fn grace(&self, stop_grace: u64) -> Instant {
        self.stage(Duration::from_secs(stop_grace).min(GRACE_MAX), KILL + LOGS + REMOVAL_MIN + TAIL)
    }

    pub fn kill(&self) -> Instant {
        self.stage(KILL, LOGS + REMOVAL_MIN + TAIL)
    }

    pub fn logs(&self) -> Instant {
        self.stage(LOGS, REMOVAL_MIN + TAIL)
    }

    pub fn removal(&self) -> Instant {
        self.stage(TOTAL, TAIL)
    }

    /// The end of everything.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// Now plus `share`, but no later than `reserve` before the end.
    fn stage(&self, share: Duration, reserve: Duration) -> Instant {
        let latest = self.end.checked_sub(reserve).unwrap_or(self.end);
        (Instant::now() + share).min(latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stages_shares_add_up_to_the_total_well_inside_the_plugins_150_s() {
        assert!(GRACE_MAX + KILL + LOGS + REMOVAL_MIN + TAIL <= TOTAL);
        assert!(TOTAL + Duration::from_secs(20) <= Duration::from_secs(150));
    }

    #[test]
    fn a_stage_never_eats_the_later_stages_minimum_and_nothing_passes_the_end() {
        let b = Budget::start();
        let now = Instant::now();
        assert!(b.grace(600) <= now + GRACE_MAX + Duration::from_millis(50));
        assert!(b.grace(5) <= now + Duration::from_secs(5) + Duration::from_millis(50));
        // Late: 40 s left, less than the removal's minimum and the tail: the
        // logs get nothing, the removal gets all but the tail.
        let late = Budget::ending(Instant::now() + Duration::from_secs(40));
        assert!(late.logs() <= Instant::now());
        assert!(late.removal() > Instant::now() && late.removal() <= late.end() - TAIL);
        for at in [b.grace(600), b.kill(), b.logs(), b.removal()] {
            assert!(at <= b.end());
        }
    }
}
