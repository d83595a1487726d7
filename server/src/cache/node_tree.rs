//! The order in which nodes are listed: interleaved across zones.
//!
//! Sampling stops after enough feasible nodes; listing nodes round-robin over
//! zones (zones in the order they appeared, nodes within a zone likewise)
//! makes a sample span zones instead of exhausting the first one.

use std::collections::HashMap;
use std::sync::Arc;

/// Node names grouped by zone key.
#[derive(Debug, Default, Clone)]
pub struct NodeTree {
    zones: Vec<String>,
    tree: HashMap<String, Vec<Arc<str>>>,
    num_nodes: usize,
}

impl NodeTree {
    /// Adds a node to its zone (no-op if already there).
    pub fn add(&mut self, zone: &str, name: &Arc<str>) {
        let names = match self.tree.get_mut(zone) {
            Some(names) => names,
            None => {
                self.zones.push(zone.to_string());
                self.tree.entry(zone.to_string()).or_default()
            }
        };
        if !names.iter().any(|n| n == name) {
            names.push(name.clone());
            self.num_nodes += 1;
        }
    }

    /// Removes a node from its zone.
    pub fn remove(&mut self, zone: &str, name: &str) {
        let Some(names) = self.tree.get_mut(zone) else {
            return;
        };
        if let Some(i) = names.iter().position(|n| &**n == name) {
            names.remove(i);
            self.num_nodes -= 1;
        }
        if names.is_empty() {
            self.tree.remove(zone);
            self.zones.retain(|z| z != zone);
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.num_nodes
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.num_nodes == 0
    }

    /// All nodes, round-robin over zones.
    pub fn list(&self) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(self.num_nodes);
        let mut round = 0;
        while out.len() < self.num_nodes {
            for zone in &self.zones {
                if let Some(name) = self.tree[zone].get(round) {
                    out.push(name.clone());
                }
            }
            round += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaves_zones() {
        let mut t = NodeTree::default();
        for (zone, name) in [
            ("a", "a1"),
            ("a", "a2"),
            ("b", "b1"),
            ("a", "a3"),
            ("c", "c1"),
            ("c", "c2"),
        ] {
            t.add(zone, &Arc::from(name));
        }
        let names: Vec<String> = t.list().iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["a1", "b1", "c1", "a2", "c2", "a3"]);
        t.remove("b", "b1");
        t.add("a", &Arc::from("a1"));
        let names: Vec<String> = t.list().iter().map(|n| n.to_string()).collect();
        assert_eq!(names, ["a1", "c1", "a2", "c2", "a3"]);
        assert_eq!(t.len(), 5);
    }
}
