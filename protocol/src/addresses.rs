//! The job's node addresses, which the plugin sends `syndeo-agent prolog`
//! on its stdin: `{"node": "addr", ...}` as Slurm's configuration gives
//! them (NodeAddr), as JSON.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Node name to address; a node the plugin could not place is not in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeAddresses(pub BTreeMap<String, String>);

impl NodeAddresses {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a map of strings serializes")
    }

    /// What the plugin sent; nothing at all is no addresses.
    pub fn decode(text: &str) -> Result<NodeAddresses, serde_json::Error> {
        if text.trim().is_empty() {
            return Ok(NodeAddresses::default());
        }
        serde_json::from_str(text)
    }

    pub fn get(&self, node: &str) -> Option<&str> {
        self.0.get(node).map(String::as_str)
    }
}

impl FromIterator<(String, String)> for NodeAddresses {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Self {
        NodeAddresses(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_whatever_the_names_hold() {
        let a: NodeAddresses =
            [("n1", "10.0.0.1"), ("we\"ird\\\n", "::1")].into_iter().map(|(n, a)| (n.into(), a.into())).collect();
        assert_eq!(NodeAddresses::decode(&a.encode()).unwrap(), a);
        assert_eq!(a.get("n1"), Some("10.0.0.1"));
        let two: NodeAddresses =
            [("n1".into(), "10.0.0.1".into()), ("n2".into(), "10.0.0.2".into())].into_iter().collect();
        assert_eq!(two.encode(), r#"{"n1":"10.0.0.1","n2":"10.0.0.2"}"#);
        assert_eq!(NodeAddresses::decode(" \n").unwrap(), NodeAddresses::default());
        assert!(NodeAddresses::decode("[1]").is_err());
    }
}
