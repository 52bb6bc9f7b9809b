//! Whose fault a failure is. A user fault (a bad image, a missing work
//! directory) fails that job only, with a message that says what to fix. A
//! node fault (a runtime not installed, a broken base directory) is the
//! admins' to mend; its message starts with "node fault:".
use std::fmt;

/// What a node fault's message starts with.
pub const NODE_FAULT: &str = "node fault: ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The job's user can fix it.
    User(String),
    /// The node (its admins) must be fixed.
    Node(String),
}

impl Fault {
    pub fn user(m: impl Into<String>) -> Fault {
        Fault::User(m.into())
    }

    pub fn node(m: impl Into<String>) -> Fault {
        Fault::Node(m.into())
    }

    pub fn is_node(&self) -> bool {
        matches!(self, Fault::Node(_))
    }

    /// The same fault with `context` before its message.
    pub fn context(self, context: impl fmt::Display) -> Fault {
        match self {
            Fault::User(m) => Fault::User(format!("{context}: {m}")),
            Fault::Node(m) => Fault::Node(format!("{context}: {m}")),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::User(m) => f.write_str(m),
            Fault::Node(m) => write!(f, "{NODE_FAULT}{m}"),
        }
    }
}

impl std::error::Error for Fault {}

impl From<Fault> for String {
    fn from(f: Fault) -> String {
        f.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_faults_say_so_and_user_faults_say_only_what_to_fix() {
        assert_eq!(Fault::node("bwrap is missing").to_string(), "node fault: bwrap is missing");
        assert_eq!(Fault::user("image /x does not exist").to_string(), "image /x does not exist");
        assert_eq!(Fault::node("x").context("n1").to_string(), "node fault: n1: x");
        assert!(Fault::node("x").is_node() && !Fault::user("x").is_node());
    }
}
