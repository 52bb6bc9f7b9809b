//! The epilog's decisions, on a fake node (`fake_epilog_ops.rs`): the order
//! of stop, kill, logs and removal; which temp base and metrics directory
//! it cleans; what leaves the node in service (paths it could not remove)
//! and what is a node fault (processes that survive SIGKILL).
use std::path::PathBuf;

use syndeo_protocol::root::Common;

use super::budget::Budget;
use super::epilog::{run_with, Cleaned};
use super::fake_epilog_ops::FakeEpilogOps;

fn common() -> Common {
    Common {
        job: 42,
        uid: 1000,
        config: PathBuf::from("/etc/syndeo/syndeo.toml"),
        runtime_base: PathBuf::from("/run/syndeo"),
    }
}

fn epilog(ops: &FakeEpilogOps) -> anyhow::Result<Cleaned> {
    run_with(ops, &common(), &Budget::start())
}

#[test]
fn a_clean_epilog_stops_the_supervisor_kills_saves_logs_then_removes_the_dirs_the_prolog_made() {
    let mut ops = FakeEpilogOps::with_state(42, |s| s.config.temp_base = "/scratch/syndeo".into());
    ops.supervisor_runs = true;
    ops.temp_base = Some(Ok("/elsewhere".into()));
    assert_eq!(epilog(&ops).unwrap(), Cleaned::All);
    let expected = [
        "stop 77 grace 15",
        "kill uid 1000 job 42 session Some(77)",
        "logs 42",
        "remove /run/syndeo/42",
        "remove /scratch/syndeo/42",
        "remove /run/syndeo-shm/42",
        "state 42",
        "clear-note 42",
    ];
    assert_eq!(ops.calls(), expected, "the temp base is the one the prolog chose, not a new choice");
}

#[test]
fn a_supervisor_that_no_longer_runs_gives_no_session_to_the_kill() {
    let ops = FakeEpilogOps::with_state(42, |_| {});
    epilog(&ops).unwrap();
    assert!(ops.calls().contains(&"kill uid 1000 job 42 session None".to_string()), "{:?}", ops.calls());
}

#[test]
fn without_state_the_temp_base_is_chosen_again_and_an_unusable_choice_falls_back_to_the_configs() {
    let mut ops = FakeEpilogOps::new();
    ops.temp_base = Some(Ok("/scratch/again".into()));
    epilog(&ops).unwrap();
    let calls = ops.calls();
    assert!(calls.contains(&"remove /scratch/again/42".to_string()), "{calls:?}");
    assert!(!calls.iter().any(|c| c.starts_with("stop") || c.starts_with("logs")), "no state, no stop: {calls:?}");

    ops.calls.borrow_mut().clear();
    ops.temp_base = Some(Err("inside job_container's /tmp".into()));
    epilog(&ops).unwrap();
    assert!(ops.calls().contains(&"remove /tmp/syndeo/42".to_string()), "{:?}", ops.calls());
}

#[test]
fn an_invalid_site_config_still_cleans_up_with_the_default_paths() {
    let mut ops = FakeEpilogOps::new();
    ops.config = Err("unknown field `tmep_base`".into());
    assert_eq!(epilog(&ops).unwrap(), Cleaned::All);
    let removed: Vec<String> = ops.calls().into_iter().filter(|c| c.starts_with("remove ")).collect();
    assert_eq!(removed, ["remove /run/syndeo/42", "remove /tmp/syndeo/42", "remove /run/syndeo-shm/42"]);
}

#[test]
fn a_state_dir_that_is_not_roots_alone_is_not_read_and_the_job_is_still_cleaned() {
    let mut ops = FakeEpilogOps::new();
    ops.state_dir = Err("/run/syndeo/.jobs/42 is owner 1000".into());
    assert_eq!(epilog(&ops).unwrap(), Cleaned::All);
    let calls = ops.calls();
    assert_eq!(calls[0], "kill uid 1000 job 42 session None", "no supervisor is trusted from it: {calls:?}");
    assert!(calls.contains(&"state 42".to_string()) && calls.contains(&"clear-note 42".to_string()));
}

#[test]
fn processes_that_survive_sigkill_are_a_node_fault_named_after_everything_else_is_removed() {
    let mut ops = FakeEpilogOps::with_state(42, |_| {});
    ops.survivors = vec![5, 6];
    let err = epilog(&ops).expect_err("survivors are the node's fault");
    assert_eq!(err.to_string(), "processes of job 42 survived SIGKILL: pid 5 (stuck), pid 6 (stuck)");
    assert_eq!(ops.calls().last().map(String::as_str), Some("clear-note 42"), "{:?}", ops.calls());
}

#[test]
fn paths_that_resist_removal_leave_the_node_in_service_as_not_clean() {
    let mut ops = FakeEpilogOps::new();
    ops.stuck.insert("/tmp/syndeo/42".into(), "Device or resource busy".into());
    assert_eq!(epilog(&ops).unwrap(), Cleaned::NotAll);
    assert!(ops.calls().contains(&"clear-note 42".to_string()), "one stuck path stops nothing else");
    let mut state = FakeEpilogOps::new();
    state.stuck.insert("/run/syndeo/.jobs/42".into(), "Permission denied".into());
    assert_eq!(epilog(&state).unwrap(), Cleaned::NotAll, "a state dir left is not clean either");
}

#[test]
fn the_metrics_file_goes_from_the_prologs_directory_else_the_sites_with_this_nodes_name() {
    let ops = FakeEpilogOps::with_state(42, |s| s.config.metrics_sd_dir = "/var/lib/prom/then".into());
    epilog(&ops).unwrap();
    assert!(ops.calls().contains(&"metrics /var/lib/prom/then 42 node1".to_string()), "{:?}", ops.calls());

    let mut ops = FakeEpilogOps::new();
    ops.env.insert("SLURMD_NODENAME".into(), "node7".into());
    ops.config = Ok(crate::config::Config { metrics_sd_dir: "/var/lib/prom/now".into(), ..Default::default() });
    ops.stuck.insert("/var/lib/prom/now".into(), "Read-only file system".into());
    assert_eq!(epilog(&ops).unwrap(), Cleaned::NotAll, "a metrics file left is named, not a node fault");
    assert!(ops.calls().contains(&"metrics /var/lib/prom/now 42 node7".to_string()), "{:?}", ops.calls());
}

#[test]
fn without_a_metrics_directory_no_metrics_file_is_touched() {
    let ops = FakeEpilogOps::with_state(42, |_| {});
    epilog(&ops).unwrap();
    assert!(!ops.calls().iter().any(|c| c.starts_with("metrics")), "{:?}", ops.calls());
}
