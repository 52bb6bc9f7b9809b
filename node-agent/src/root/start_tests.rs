//! `start`'s decisions, on a fake node (`fake_start_ops.rs`): the order of
//! the hand-shake, the mesh's socket, the sealed state and the supervisor;
//! what refuses the job with a note and leaves the node in service (no
//! mesh port to be had); what is a node fault (an error, and the node
//! drained with a reason naming it); and how the wait for the agent ends.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use syndeo_protocol::root::{Common, Start as StartArgs};

use super::fake_start_ops::{FakeStartOps, SUPERVISOR_PID, SUPERVISOR_START};
use super::start::{run_with, wait_for_agent, AgentStart};

fn args(hold: bool) -> StartArgs {
    StartArgs {
        common: Common {
            job: 42,
            uid: 1000,
            config: PathBuf::from("/etc/syndeo/syndeo.toml"),
            runtime_base: PathBuf::from("/run/syndeo"),
        },
        hold,
    }
}

/// The job's n-th candidate mesh port.
fn port(ops: &FakeStartOps, n: usize) -> u16 {
    ops.spec().mesh_ports()[n]
}

/// A job refused on this node: `start` succeeds, leaves exactly one note
/// for the job's user, starts nothing and drains nothing.
fn assert_refused(ops: &FakeStartOps, result: anyhow::Result<()>) -> String {
    result.expect("a refused job is not a failed start");
    assert!(ops.drained.borrow().is_empty(), "the job's refusal drained the node: {:?}", ops.drained.borrow());
    assert!(!ops.did("seal") && !ops.did("spawn"), "a refused job has no agent: {:?}", ops.calls());
    assert!(ops.did("note 42 1000:1000"), "the note is the job user's: {:?}", ops.calls());
    let notes = ops.notes.borrow();
    assert_eq!(notes.len(), 1, "{notes:?}");
    notes[0].clone()
}

/// A node fault: the error names `cause`, the node is drained with it, no
/// note is left, and the plugin still gets its end of stdin.
fn assert_node_fault(ops: &FakeStartOps, result: anyhow::Result<()>, cause: &str) {
    let err = result.expect_err("a node fault fails start");
    assert_eq!(format!("{err:#}"), cause);
    let drained = ops.drained.borrow();
    assert_eq!(*drained, [("node1".to_string(), format!("node fault starting the agent of job 42: {cause}"))]);
    assert!(ops.notes.borrow().is_empty(), "a node fault is not the user's to read");
    assert!(ops.calls().ends_with(&["drain node1".to_string(), "eof".to_string()]), "{:?}", ops.calls());
}

#[test]
fn a_prepared_job_gets_its_first_mesh_port_its_sealed_state_and_a_recorded_supervisor_holding_both() {
    let ops = FakeStartOps::new();
    run_with(&ops, &args(true)).unwrap();
    let mesh = format!("10.0.0.1:{}", port(&ops, 0));
    let expected = [
        "read-go".to_string(),
        "open-state 42".into(),
        "load-state".into(),
        format!("listen {mesh}"),
        "seal 42".into(),
        format!("spawn supervisor of u with 3={mesh} 4=sealed state of job 42"),
        format!("record {SUPERVISOR_PID} {SUPERVISOR_START}"),
        format!("tell supervisor {SUPERVISOR_PID}"),
        "eof".into(),
    ];
    assert_eq!(ops.calls(), expected);
    assert!(ops.notes.borrow().is_empty() && ops.drained.borrow().is_empty());
}

#[test]
fn without_hold_start_neither_waits_for_go_nor_for_the_plugin_to_close_stdin() {
    let ops = FakeStartOps::new();
    run_with(&ops, &args(false)).unwrap();
    assert!(ops.did("spawn"), "{:?}", ops.calls());
    assert!(!ops.did("read-go") && !ops.did("eof"), "{:?}", ops.calls());
}

#[test]
fn a_plugin_that_does_not_say_go_ends_start_before_roots_state_is_opened() {
    let mut ops = FakeStartOps::new();
    ops.plugin_line = Ok("stop\n".into());
    let err = run_with(&ops, &args(true)).expect_err("no go, no start");
    assert_eq!(err.to_string(), "the plugin did not say go (\"stop\"); not starting the agent");
    ops.plugin_line = Err("waiting for the plugin's go: Broken pipe".into());
    assert!(run_with(&ops, &args(true)).is_err(), "a plugin gone is no go either");
    assert_eq!(ops.calls(), ["read-go", "read-go"]);
    assert!(ops.drained.borrow().is_empty());
}

#[test]
fn a_job_the_prolog_refused_has_no_state_and_start_does_nothing_more() {
    let mut ops = FakeStartOps::new();
    ops.state_dir = Ok(false);
    run_with(&ops, &args(true)).unwrap();
    assert_eq!(ops.calls(), ["read-go", "open-state 42"]);
    assert!(ops.notes.borrow().is_empty(), "the prolog's note stays the only one");
}

#[test]
fn a_state_dir_not_roots_alone_or_unreadable_is_an_error_that_starts_nothing_and_drains_nothing() {
    let mut ops = FakeStartOps::new();
    ops.state_dir = Err("/run/syndeo/.jobs/42 is not root's alone; refusing to use it".into());
    assert!(run_with(&ops, &args(true)).is_err());
    let mut unreadable = FakeStartOps::new();
    unreadable.state = Err("/run/syndeo/.jobs/42 has no spec.json".into());
    assert!(run_with(&unreadable, &args(true)).is_err());
    for ops in [&ops, &unreadable] {
        // Without the spec, the node's name for a drain is unknown.
        assert!(!ops.did("listen") && !ops.did("spawn") && !ops.did("eof"), "{:?}", ops.calls());
        assert!(ops.drained.borrow().is_empty() && ops.notes.borrow().is_empty());
    }
}

#[test]
fn taken_mesh_ports_are_passed_over_in_the_jobs_candidate_order() {
    let mut ops = FakeStartOps::new();
    ops.taken = [port(&ops, 0), port(&ops, 1)].into();
    run_with(&ops, &args(true)).unwrap();
    let listens: Vec<String> = ops.calls().into_iter().filter(|c| c.starts_with("listen")).collect();
    let tried: Vec<String> = (0..3).map(|n| format!("listen 10.0.0.1:{}", port(&ops, n))).collect();
    assert_eq!(listens, tried);
    assert!(ops.did(&format!("spawn supervisor of u with 3=10.0.0.1:{} ", port(&ops, 2))), "{:?}", ops.calls());
}

#[test]
fn no_free_mesh_port_leaves_a_note_for_the_jobs_steps_and_keeps_the_node_in_service() {
    let mut ops = FakeStartOps::new();
    ops.taken = ops.spec().mesh_ports().into_iter().collect();
    let note = assert_refused(&ops, run_with(&ops, &args(true)));
    let ports = ops.spec().mesh_ports();
    assert_eq!(
        note,
        format!(
            "none of this job's mesh ports {ports:?} is free on node1 (10.0.0.1); too many syndeo jobs run there, \
             or other services use those ports: ask the admins to widen mesh_ports"
        )
    );
    assert_eq!(ops.calls().last().map(String::as_str), Some("eof"), "the plugin still gets its end");
}

#[test]
fn a_kernel_that_lets_users_bind_the_mesh_ports_refuses_the_job_before_binding_any() {
    let mut ops = FakeStartOps::new();
    ops.unprivileged_port_start = Some("999\n".into());
    let note = assert_refused(&ops, run_with(&ops, &args(true)));
    assert_eq!(
        note,
        "net.ipv4.ip_unprivileged_port_start is 999 on node1, so users can bind syndeo's mesh ports (up to 999); \
         ask the admins to raise it above 999"
    );
    assert!(!ops.did("listen"), "{:?}", ops.calls());
}

#[test]
fn a_port_rule_above_the_mesh_ports_or_unreadable_or_unparsable_lets_the_job_start() {
    for rule in [Some("1000\n"), None, Some("not a number")] {
        let mut ops = FakeStartOps::new();
        ops.unprivileged_port_start = rule.map(String::from);
        run_with(&ops, &args(true)).unwrap();
        assert!(ops.did("spawn") && ops.notes.borrow().is_empty(), "{rule:?}: {:?}", ops.calls());
    }
}

#[test]
fn a_node_without_an_address_from_slurm_binds_its_names_ipv4_address_before_ipv6() {
    let mut ops = FakeStartOps::with_spec(|s| s.addrs.clear());
    ops.resolved = Ok(vec!["fd00::1".parse().unwrap(), "10.1.0.1".parse().unwrap()]);
    run_with(&ops, &args(true)).unwrap();
    assert!(ops.did("resolve node1"));
    assert!(ops.did(&format!("listen 10.1.0.1:{}", port(&ops, 0))), "{:?}", ops.calls());

    let mut v6 = FakeStartOps::with_spec(|s| s.addrs.clear());
    v6.resolved = Ok(vec!["fd00::1".parse().unwrap()]);
    run_with(&v6, &args(true)).unwrap();
    assert!(v6.did(&format!("listen [fd00::1]:{}", port(&v6, 0))), "{:?}", v6.calls());
}

#[test]
fn a_node_name_without_an_address_refuses_the_job_with_a_note_not_a_drain() {
    let mut ops = FakeStartOps::with_spec(|s| s.addrs.clear());
    ops.resolved = Err("failed to lookup address information".into());
    let note = assert_refused(&ops, run_with(&ops, &args(true)));
    assert_eq!(note, "resolving node1: failed to lookup address information");
    let mut none = FakeStartOps::with_spec(|s| s.addrs.clear());
    none.resolved = Ok(vec![]);
    assert_eq!(assert_refused(&none, run_with(&none, &args(true))), "node1 has no address");
}

#[test]
fn a_state_that_cannot_be_sealed_is_a_node_fault_and_no_supervisor_starts() {
    let mut ops = FakeStartOps::new();
    ops.failing.insert("seal", "memfd_create: ENOMEM: Out of memory".into());
    assert_node_fault(&ops, run_with(&ops, &args(true)), "memfd_create: ENOMEM: Out of memory");
    assert!(!ops.did("spawn"), "{:?}", ops.calls());
}

#[test]
fn a_supervisor_that_cannot_be_started_is_a_node_fault_and_nothing_is_recorded() {
    let mut ops = FakeStartOps::new();
    ops.failing.insert("spawn", "starting the node agent's supervisor: EAGAIN".into());
    assert_node_fault(&ops, run_with(&ops, &args(true)), "starting the node agent's supervisor: EAGAIN");
    assert!(!ops.did("record") && !ops.did("tell"), "{:?}", ops.calls());
}

#[test]
fn a_supervisor_record_that_cannot_be_written_is_a_node_fault_and_the_plugin_gets_no_pid() {
    let mut ops = FakeStartOps::new();
    ops.failing.insert("record", "writing /run/syndeo/.jobs/42/supervisor: No space left on device".into());
    let cause = "writing /run/syndeo/.jobs/42/supervisor: No space left on device";
    assert_node_fault(&ops, run_with(&ops, &args(true)), cause);
    assert!(!ops.did("tell"), "{:?}", ops.calls());
}

#[test]
fn a_note_that_cannot_be_written_for_a_refused_job_is_a_node_fault() {
    let mut ops = FakeStartOps::new();
    ops.unprivileged_port_start = Some("0".into());
    ops.failing.insert("note", "writing the job's note /run/syndeo/.notes/42: Read-only file system".into());
    let cause = "writing the job's note /run/syndeo/.notes/42: Read-only file system";
    assert_node_fault(&ops, run_with(&ops, &args(true)), cause);
}

#[test]
fn a_supervisor_gone_before_its_start_time_is_read_is_recorded_with_start_time_zero_and_start_succeeds() {
    let mut ops = FakeStartOps::new();
    ops.supervisor = None;
    ops.socket_appears = false;
    run_with(&ops, &args(true)).unwrap();
    // Start time 0 matches no process: the epilog never signals a reused PID for it.
    assert!(ops.did(&format!("record {SUPERVISOR_PID} 0")), "{:?}", ops.calls());
    assert!(ops.drained.borrow().is_empty());
}

fn wait(ops: &FakeStartOps, limit: Duration) -> AgentStart {
    wait_for_agent(ops, &ops.spec().dir(), SUPERVISOR_PID, Instant::now() + limit)
}

#[test]
fn the_agent_is_ready_once_its_socket_or_the_jobs_note_appears_even_if_the_supervisor_then_ended() {
    let mut ops = FakeStartOps::new();
    ops.supervisor = Some('Z');
    assert_eq!(wait(&ops, Duration::from_secs(10)), AgentStart::Ready);
    ops.socket_appears = false;
    ops.note_appears = true;
    assert_eq!(wait(&ops, Duration::from_secs(10)), AgentStart::Ready);
}

#[test]
fn a_supervisor_that_is_gone_or_a_zombie_ends_the_wait_as_exited() {
    let mut ops = FakeStartOps::new();
    ops.socket_appears = false;
    for supervisor in [None, Some('Z')] {
        ops.supervisor = supervisor;
        assert_eq!(wait(&ops, Duration::from_secs(10)), AgentStart::Exited, "{supervisor:?}");
    }
}

#[test]
fn an_agent_that_neither_listens_nor_ends_by_the_deadline_is_silent() {
    let mut ops = FakeStartOps::new();
    ops.socket_appears = false;
    let begun = Instant::now();
    assert_eq!(wait(&ops, Duration::from_millis(50)), AgentStart::Silent);
    assert!(begun.elapsed() >= Duration::from_millis(50), "it waited the whole time");
}
