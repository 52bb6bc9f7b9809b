//! Unprivileged user namespaces, which both runtimes need to run a job's
//! container without root: the kernel's limits (`user.max_user_namespaces`,
//! Debian's `kernel.unprivileged_userns_clone`, Ubuntu's
//! `kernel.apparmor_restrict_unprivileged_userns`), and a real
//! `unshare(CLONE_NEWUSER)` by the unprivileged user.
use std::path::Path;

use super::{Check, NodeFacts, ProbeRequest, ProbeUser};

const NAME: &str = "user-namespaces";
pub const MAX_USER_NAMESPACES: &str = "/proc/sys/user/max_user_namespaces";
const USERNS_CLONE: &str = "/proc/sys/kernel/unprivileged_userns_clone";
const APPARMOR_RESTRICT: &str = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns";

fn number(node: &dyn NodeFacts, path: &str) -> Option<i64> {
    node.read_text(Path::new(path)).ok()?.trim().parse().ok()
}

pub fn check(node: &dyn NodeFacts, user: &ProbeUser) -> Check {
    if number(node, MAX_USER_NAMESPACES) == Some(0) {
        return Check::fail(
            NAME,
            "user.max_user_namespaces is 0: no user can create a user namespace, so no container starts",
            "sysctl -w user.max_user_namespaces=15000, and keep it in /etc/sysctl.d/",
        );
    }
    if number(node, USERNS_CLONE) == Some(0) {
        return Check::fail(
            NAME,
            "kernel.unprivileged_userns_clone is 0: users cannot create user namespaces",
            "sysctl -w kernel.unprivileged_userns_clone=1, and keep it in /etc/sysctl.d/",
        );
    }
    let probe = node.probe(&ProbeRequest::UserNamespace, user);
    let created = match probe.as_ref().map(|r| r.userns.as_ref()) {
        Ok(Some(o)) if o.ok => format!("{} created one", user.name),
        Ok(Some(o)) => {
            return Check::fail(
                NAME,
                format!("{} cannot create a user namespace: {}", user.name, o.text),
                "allow unprivileged user namespaces (a security module or seccomp policy may forbid them)",
            )
        }
        Ok(None) => return Check::fail(NAME, "the probe did not try", "see the message"),
        Err(e) => return Check::fail(NAME, format!("cannot run the probe as {}: {e:#}", user.name), "see the message"),
    };
    let max = number(node, MAX_USER_NAMESPACES).map_or("unknown".to_string(), |n| n.to_string());
    if number(node, APPARMOR_RESTRICT).is_some_and(|n| n != 0) {
        return Check::warn(
            NAME,
            format!(
                "{created}, but kernel.apparmor_restrict_unprivileged_userns is on: only programs with an AppArmor \
                 profile get capabilities in one (runtime-start shows whether the runtime has one)"
            ),
            "give the runtime an AppArmor profile that allows userns (Ubuntu's apptainer and bubblewrap packages \
             ship one), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        );
    }
    Check::ok(NAME, format!("{created} (user.max_user_namespaces={max})"))
}

#[cfg(test)]
mod tests {
    use super::super::facts::Outcome;
    use super::super::fake::FakeNode;
    use super::super::Status;
    use super::*;

    fn run(node: &FakeNode) -> Check {
        check(node, &FakeNode::nobody())
    }

    #[test]
    fn namespaces_a_user_can_create_are_ok() {
        let c = run(&FakeNode::healthy());
        assert!(c.status == Status::Ok && c.detail.contains("nobody created one"), "{c:?}");
    }

    #[test]
    fn max_user_namespaces_zero_fails_with_the_sysctl() {
        let mut node = FakeNode::healthy();
        node.file(MAX_USER_NAMESPACES, "0\n");
        let c = run(&node);
        assert!(
            c.status == Status::Fail && c.fix.as_deref().unwrap().contains("user.max_user_namespaces"),
            "{}",
            c.detail
        );
    }

    #[test]
    fn debians_userns_clone_off_fails() {
        let mut node = FakeNode::healthy();
        node.file(USERNS_CLONE, "0\n");
        assert_eq!(run(&node).status, Status::Fail);
    }

    #[test]
    fn ubuntus_apparmor_restriction_warns_and_its_absence_is_fine() {
        let mut node = FakeNode::healthy();
        node.file(APPARMOR_RESTRICT, "1\n");
        let c = run(&node);
        assert!(c.status == Status::Warn && c.fix.as_deref().unwrap().contains("apparmor_restrict"), "{c:?}");
        node.file(APPARMOR_RESTRICT, "0\n");
        assert_eq!(run(&node).status, Status::Ok);
    }

    #[test]
    fn a_user_who_cannot_unshare_fails_with_the_error() {
        let mut node = FakeNode::healthy();
        node.userns_report.userns = Some(Outcome::failed("unshare(CLONE_NEWUSER): EPERM"));
        let c = run(&node);
        assert!(c.status == Status::Fail && c.detail.contains("EPERM"), "{c:?}");
    }
}
