//! Where a node's VNs may run (issue 43): a VN host runs at most one VN of each node. The host knows which
//! node each VN it runs answers to (its config names the node's link identity), so two VNs of one node on one
//! host are tied together by that host, and by the address they share. `node vn` refuses such a config
//! (`host_config.rs`), and `node kit` refuses such a placement before writing any file (`kit/`).

/// Why the rule holds; every refusal says it.
pub const ONE_VN_PER_NODE_PER_HOST: &str = "a host runs at most one VN of each node, since the VNs one host \
                                            runs for one node are tied together by that host";

/// The first VN that breaks the rule among the VNs one host runs, given the node of each in order:
/// `(earlier, later)`, the indices of two VNs of one node; `None` when every VN is of another node.
pub fn two_of_one_node<T: PartialEq>(owners: &[T]) -> Option<(usize, usize)> {
    owners.iter().enumerate().find_map(|(later, owner)| {
        owners[..later]
            .iter()
            .position(|o| o == owner)
            .map(|earlier| (earlier, later))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_pair_of_one_node() {
        assert_eq!(two_of_one_node::<u8>(&[]), None);
        assert_eq!(two_of_one_node(&["a", "b", "c"]), None);
        assert_eq!(two_of_one_node(&["a", "b", "a", "b"]), Some((0, 2)));
        assert_eq!(two_of_one_node(&["a", "b", "c", "b"]), Some((1, 3)));
    }
}
