//! The peer list: which virtual nodes may take part in the network and where some of them can be reached.
//!
//! A TOML file with one `[[peer]]` table per allowed VN:
//!
//! ```toml
//! [[peer]]
//! id = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
//! addr = "/ip4/192.0.2.10/tcp/4001"   # optional: makes this VN a bootstrap entry
//! ```
//!
//! Every node of a permissioned network uses the same list. A VN that is not on it is refused: it never
//! receives a chunk or a gossip entry, and what it sends is dropped. Peers with an `addr` seed the Cyclon
//! views of joining VNs; the others are learned through gossip.

use std::collections::BTreeMap;
use std::path::Path;

use libp2p::{Multiaddr, PeerId};
use serde::Deserialize;

use crate::{NodeError, Result, VnAddr};

/// Most peers a list may name. A network of 1,000 nodes with 16 virtual nodes each is 16,000; the bound
/// keeps a mistaken or hostile file from making the allow-list unbounded.
pub const MAX_PEERS: usize = 100_000;

/// The parsed peer list.
#[derive(Debug, Clone, Default)]
pub struct PeerList {
    allowed: BTreeMap<PeerId, Option<Multiaddr>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    peer: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    addr: Option<String>,
}

impl PeerList {
    /// Reads and checks a peer list file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses peer list text; `path` is only used in error messages.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let file: File =
            toml::from_str(text).map_err(|e| NodeError::file(path, "toml", e.message()))?;
        if file.peer.len() > MAX_PEERS {
            return Err(NodeError::file(
                path,
                "peer",
                format!("{} entries exceed MAX_PEERS = {MAX_PEERS}", file.peer.len()),
            ));
        }
        let mut allowed = BTreeMap::new();
        for (i, e) in file.peer.iter().enumerate() {
            let field = |f: &str| format!("peer[{i}].{f}");
            let id: PeerId = e.id.parse().map_err(|err| {
                NodeError::file(
                    path,
                    field("id"),
                    format!("'{}' is not a PeerId: {err}", e.id),
                )
            })?;
            let addr = match &e.addr {
                Some(a) => Some(a.parse::<Multiaddr>().map_err(|err| {
                    NodeError::file(
                        path,
                        field("addr"),
                        format!("'{a}' is not a multiaddr: {err}"),
                    )
                })?),
                None => None,
            };
            if allowed.insert(id, addr).is_some() {
                return Err(NodeError::file(
                    path,
                    field("id"),
                    format!("{id} is listed twice"),
                ));
            }
        }
        Ok(Self { allowed })
    }

    /// Reads `PEER_ID [MULTIADDR]` lines (what `node keygen` prints, an address added to make an entry a
    /// bootstrap one; `#` starts a comment) from several nodes' files into one list. The list is kept and
    /// written in PeerId order, whatever the order of the files and lines: concatenated node by node, a
    /// shared peer list would tell every participant which VNs are siblings (DESIGN §7).
    pub fn from_id_files(files: &[(std::path::PathBuf, String)]) -> Result<Self> {
        let mut allowed = BTreeMap::new();
        for (path, text) in files {
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let at = format!("line {}", n + 1);
                let mut words = line.split_whitespace();
                let id = words.next().unwrap_or_default();
                let id: PeerId = id.parse().map_err(|err| {
                    NodeError::file(path, &at, format!("'{id}' is not a PeerId: {err}"))
                })?;
                let addr = match words.next() {
                    Some(a) => Some(a.parse::<Multiaddr>().map_err(|err| {
                        NodeError::file(path, &at, format!("'{a}' is not a multiaddr: {err}"))
                    })?),
                    None => None,
                };
                if let Some(extra) = words.next() {
                    return Err(NodeError::file(
                        path,
                        &at,
                        format!("'{extra}': a line is a PeerId and at most one address"),
                    ));
                }
                if allowed.insert(id, addr).is_some() {
                    return Err(NodeError::file(path, &at, format!("{id} is listed twice")));
                }
                if allowed.len() > MAX_PEERS {
                    return Err(NodeError::file(
                        path,
                        &at,
                        format!("more than MAX_PEERS = {MAX_PEERS} entries"),
                    ));
                }
            }
        }
        Ok(Self { allowed })
    }

    /// A list from identities and optional addresses (tests, the testnet, embedding).
    pub fn from_entries(entries: impl IntoIterator<Item = (PeerId, Option<Multiaddr>)>) -> Self {
        Self {
            allowed: entries.into_iter().collect(),
        }
    }

    /// Renders the list in the file format above.
    pub fn to_toml(&self) -> String {
        let mut out = String::from("# Shatter peer list: one [[peer]] per allowed virtual node.\n");
        for (id, addr) in &self.allowed {
            out.push_str(&format!("\n[[peer]]\nid = \"{id}\"\n"));
            if let Some(a) = addr {
                out.push_str(&format!("addr = \"{a}\"\n"));
            }
        }
        out
    }

    pub fn is_allowed(&self, peer: &PeerId) -> bool {
        self.allowed.contains_key(peer)
    }

    pub fn allowed(&self) -> impl Iterator<Item = &PeerId> {
        self.allowed.keys()
    }

    pub fn len(&self) -> usize {
        self.allowed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// Entries with an address, in PeerId order.
    pub fn bootstrap(&self) -> Vec<VnAddr> {
        self.allowed
            .iter()
            .filter_map(|(id, a)| a.clone().map(|a| VnAddr::new(*id, a)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id()
    }

    #[test]
    fn parses_and_renders() {
        let (a, b) = (id(), id());
        let text = format!(
            "[[peer]]\nid = \"{a}\"\naddr = \"/ip4/127.0.0.1/tcp/4001\"\n[[peer]]\nid = \"{b}\"\n"
        );
        let list = PeerList::parse(Path::new("peers.toml"), &text).unwrap();
        assert!(list.is_allowed(&a) && list.is_allowed(&b) && !list.is_allowed(&id()));
        assert_eq!(list.bootstrap().len(), 1);
        let again = PeerList::parse(Path::new("x"), &list.to_toml()).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again.bootstrap()[0].peer, a);
    }

    #[test]
    fn errors_name_file_entry_and_problem() {
        let p = Path::new("peers.toml");
        let err = PeerList::parse(p, "[[peer]]\nid = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("peers.toml") && err.contains("peer[0].id") && err.contains("nope"),
            "{err}"
        );
        let a = id();
        let err = PeerList::parse(p, &format!("[[peer]]\nid = \"{a}\"\naddr = \"tcp:4001\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("peer[0].addr"), "{err}");
        let err = PeerList::parse(
            p,
            &format!("[[peer]]\nid = \"{a}\"\n[[peer]]\nid = \"{a}\"\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("peer[1].id") && err.contains("twice"), "{err}");
        let err = PeerList::parse(p, "[[peer]]\nid = \"x\"\nport = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("port"), "{err}");
    }
}
